package dialectr

// SetMaxRosterBytes sets the roster reply's byte bound for a test and
// returns the previous one. Not for parallel tests.
func SetMaxRosterBytes(n int) int {
	prev := maxRosterBytes
	maxRosterBytes = n
	return prev
}
