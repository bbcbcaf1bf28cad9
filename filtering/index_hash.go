package filtering

// postings maps an exact attribute value to the entries anchored on it.
// It is a persistent map: writers derive a new version, readers keep the
// one they loaded.
type postings = pmap[[]*entry]

// withEntry returns m where e is also anchored on key. The entry list is
// appended in place when it has room: that writes past the length that
// older versions read, never within it, so their readers are unaffected.
func withEntry(m postings, key string, e *entry) postings {
	list, _ := m.get(key)
	return m.set(key, append(list, e))
}

// withoutEntry returns m where e is no longer anchored on key.
func withoutEntry(m postings, key string, e *entry) postings {
	list, ok := m.get(key)
	if !ok {
		return m
	}
	rest := removeEntry(list, e)
	if len(rest) == 0 {
		return m.del(key)
	}
	return m.set(key, rest)
}

// removeEntry returns a fresh slice without e (or list itself when e is not
// in it). Published slices are never modified in place.
func removeEntry(list []*entry, e *entry) []*entry {
	at := -1
	for i, x := range list {
		if x == e {
			at = i
			break
		}
	}
	if at < 0 {
		return list
	}
	if len(list) == 1 {
		return nil
	}
	out := make([]*entry, 0, len(list)-1)
	out = append(out, list[:at]...)
	return append(out, list[at+1:]...)
}
