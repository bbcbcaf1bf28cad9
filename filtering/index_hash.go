package filtering

// postings maps an exact attribute value to the entries anchored on it.
// It is a persistent map: writers derive a new version, readers keep the
// one they loaded.
type postings = pmap[list[*entry]]

// withEntry returns m where e is also anchored on key. The entry list is
// appended in place when it has room: that writes past the length that
// older versions read, never within it, so their readers are unaffected.
func withEntry(m postings, key string, e *entry) postings {
	l, _ := m.get(key)
	return m.set(key, l.with(e))
}

// withoutEntry returns m where one entry anchored on key, which the caller
// has stamped as gone, is no longer counted as live (see list).
func withoutEntry(m postings, key string) postings {
	l, ok := m.get(key)
	if !ok {
		return m
	}
	if l = l.without(); len(l.items) == 0 {
		return m.del(key)
	}
	return m.set(key, l)
}
