package jsonscan

// Member is one member of an object, as offsets into the object's bytes b.
type Member struct {
	Name    int // the opening quote of the name
	NameEnd int // just past the closing quote of the name
	Value   int // the first byte of the value
	End     int // just past the value
	// Next is where the following member's name starts when a comma
	// follows the value (past the comma and the whitespace after it), and
	// -1 when none follows: the member is the last one.
	Next int
}

// RawName returns the member's name as written, between its quotes
// (escapes not decoded).
func (m Member) RawName(b []byte) []byte { return b[m.Name+1 : m.NameEnd-1] }

// Members iterates over the members of one object:
//
//	it := jsonscan.Object(b, i)
//	for m, ok := it.Next(); ok; m, ok = it.Next() { ... }
//	if it.End() < 0 { ... the object was malformed ... }
//
// It finds spans only (names by [StringEnd], values by [ValueEnd]), so on
// bytes that are not valid JSON it may yield members of an object that a
// validator would refuse; it stops at the first byte that fits no object
// grammar. The zero value yields nothing.
type Members struct {
	b    []byte
	i    int  // the next member's name or the closing '}'; -1 when done
	last bool // no comma followed the previous member
	end  int  // just past the closing '}' once reached, else -1
}

// Object starts an iteration over the members of the object that starts at
// b[i] == '{'. When there is no '{' at i, Next yields nothing and End is -1.
func Object(b []byte, i int) Members {
	if uint(i) >= uint(len(b)) || b[i] != '{' {
		return Members{i: -1, end: -1}
	}
	return Members{b: b, i: SkipSpace(b, i+1), end: -1}
}

// Next returns the next member, or false after the last one and at the
// first byte that is not where the object grammar expects it (a missing
// name, ':' or ',', an unterminated string or value).
func (it *Members) Next() (Member, bool) {
	b, i := it.b, it.i
	if uint(i) >= uint(len(b)) {
		it.i = -1
		return Member{}, false
	}
	if b[i] == '}' {
		it.i, it.end = -1, i+1
		return Member{}, false
	}
	m := Member{Name: i, NameEnd: StringEnd(b, i)}
	if it.last || m.NameEnd < 0 {
		it.i = -1
		return Member{}, false
	}
	j := SkipSpace(b, m.NameEnd)
	if j >= len(b) || b[j] != ':' {
		it.i = -1
		return Member{}, false
	}
	m.Value = SkipSpace(b, j+1)
	if m.End = ValueEnd(b, m.Value); m.End < 0 {
		it.i = -1
		return Member{}, false
	}
	m.Next = -1
	it.i = SkipSpace(b, m.End)
	it.last = it.i >= len(b) || b[it.i] != ','
	if !it.last {
		it.i = SkipSpace(b, it.i+1)
		m.Next = it.i
	}
	return m, true
}

// End returns the offset just past the object's closing brace once Next
// has returned false there, and -1 before that or when the iteration
// stopped at malformed bytes.
func (it *Members) End() int { return it.end }

// Elements iterates over the elements of one array, like [Members] over
// the members of an object. The zero value yields nothing.
type Elements struct {
	b    []byte
	i    int
	last bool
	end  int
}

// Array starts an iteration over the elements of the array that starts at
// b[i] == '['. When there is no '[' at i, Next yields nothing and End is -1.
func Array(b []byte, i int) Elements {
	if uint(i) >= uint(len(b)) || b[i] != '[' {
		return Elements{i: -1, end: -1}
	}
	return Elements{b: b, i: SkipSpace(b, i+1), end: -1}
}

// Next returns the span b[start:end] of the next element, or false after
// the last one and at the first byte that is not where the array grammar
// expects it.
func (it *Elements) Next() (start, end int, ok bool) {
	b, i := it.b, it.i
	if uint(i) >= uint(len(b)) {
		it.i = -1
		return 0, 0, false
	}
	if b[i] == ']' {
		it.i, it.end = -1, i+1
		return 0, 0, false
	}
	end = ValueEnd(b, i)
	if it.last || end < 0 {
		it.i = -1
		return 0, 0, false
	}
	it.i = SkipSpace(b, end)
	it.last = it.i >= len(b) || b[it.i] != ','
	if !it.last {
		it.i = SkipSpace(b, it.i+1)
	}
	return i, end, true
}

// End returns the offset just past the array's closing bracket once Next
// has returned false there, and -1 before that or when the iteration
// stopped at malformed bytes.
func (it *Elements) End() int { return it.end }

// CutMember returns the span [from, to) to delete from an object to remove
// one member together with one adjacent comma, so that the rest is still
// an object: the member b[start:end] (its name's opening quote to the end
// of its value) and the comma after it up to the next member's name at
// next when one follows, else the comma before it from prevEnd (the end
// of the previous member's value) when one precedes, else the member
// alone. next and prevEnd are -1 when there is no such member; the
// arguments are offsets of one object as [Members] reports them.
func CutMember(prevEnd, start, end, next int) (from, to int) {
	switch {
	case next >= 0:
		return start, next
	case prevEnd >= 0:
		return prevEnd, end
	}
	return start, end
}
