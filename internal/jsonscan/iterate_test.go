package jsonscan

import (
	"strings"
	"testing"
)

// members lists an object's members as name=value, and the end offset.
func members(b []byte, i int) (string, int) {
	var parts []string
	it := Object(b, i)
	for m, ok := it.Next(); ok; m, ok = it.Next() {
		parts = append(parts, string(m.RawName(b))+"="+string(b[m.Value:m.End]))
	}
	return strings.Join(parts, " "), it.End()
}

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		end  int
	}{
		{`{}`, ``, 2},
		{`{ }x`, ``, 3},
		{`{"a":1}`, `a=1`, 7},
		{`{ "a" : "x" , "b":[1,{"c":2}] ,"d\"e":null }`, `a="x" b=[1,{"c":2}] d\"e=null`, 44},
		{`{"a":{"b":"}"}}`, `a={"b":"}"}`, 15},
		// malformed: the members before the fault, and End -1
		{`{"a":1`, `a=1`, -1},
		{`{"a":1 "b":2}`, `a=1`, -1},
		{`{"a" 1}`, ``, -1},
		{`{a:1}`, ``, -1},
		{`{"a":}`, ``, -1},
		{`{"a":[}`, `a=[}`, -1},
		{`{"a":"x}`, ``, -1},
		{`{"a":1,`, `a=1`, -1},
		{`{`, ``, -1},
		{`[1]`, ``, -1},
		{``, ``, -1},
		// lenient where a validator would refuse: a trailing comma
		{`{"a":1,}`, `a=1`, 8},
	} {
		got, end := members([]byte(tc.in), 0)
		if got != tc.want || end != tc.end {
			t.Errorf("members of %q = %q end %d, want %q end %d", tc.in, got, end, tc.want, tc.end)
		}
	}
	var zero Members
	if _, ok := zero.Next(); ok || zero.End() != 0 {
		t.Error("the zero Members yields a member")
	}
}

func TestMemberNext(t *testing.T) {
	b := []byte(`{"a":1 , "b":2,"c":3}`)
	it := Object(b, 0)
	var nexts []int
	for m, ok := it.Next(); ok; m, ok = it.Next() {
		nexts = append(nexts, m.Next)
	}
	if len(nexts) != 3 || nexts[0] != 9 || nexts[1] != 15 || nexts[2] != -1 {
		t.Errorf("Next offsets %v, want [9 15 -1]", nexts)
	}
}

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		end  int
	}{
		{`[]`, ``, 2},
		{`[ 1 , "a" ,{"b":[2]}, [] ,true]`, `1|"a"|{"b":[2]}|[]|true`, 31},
		{`[1,2`, `1|2`, -1},
		{`[1 2]`, `1`, -1},
		{`[,]`, ``, -1},
		{`{}`, ``, -1},
	} {
		var parts []string
		it := Array([]byte(tc.in), 0)
		for s, e, ok := it.Next(); ok; s, e, ok = it.Next() {
			parts = append(parts, tc.in[s:e])
		}
		if got := strings.Join(parts, "|"); got != tc.want || it.End() != tc.end {
			t.Errorf("elements of %q = %q end %d, want %q end %d", tc.in, got, it.End(), tc.want, tc.end)
		}
	}
}

func TestCutMember(t *testing.T) {
	for _, tc := range []struct{ in, name, want string }{
		{`{"a":1,"x":2,"b":3}`, "x", `{"a":1,"b":3}`},
		{`{"x":2, "b":3}`, "x", `{"b":3}`},
		{`{"a":1 , "x":2 }`, "x", `{"a":1 }`},
		{`{ "x":2 }`, "x", `{  }`},
	} {
		b := []byte(tc.in)
		it := Object(b, 0)
		prevEnd := -1
		for m, ok := it.Next(); ok; m, ok = it.Next() {
			if string(m.RawName(b)) == tc.name {
				from, to := CutMember(prevEnd, m.Name, m.End, m.Next)
				if got := tc.in[:from] + tc.in[to:]; got != tc.want {
					t.Errorf("cut %q from %s: %s, want %s", tc.name, tc.in, got, tc.want)
				}
			}
			prevEnd = m.End
		}
	}
}

func TestIterateAllocs(t *testing.T) {
	b := []byte(`{"a":[1,2,{"b":"c"}],"d":"e"}`)
	n := testing.AllocsPerRun(100, func() {
		it := Object(b, 0)
		for m, ok := it.Next(); ok; m, ok = it.Next() {
			el := Array(b, m.Value)
			for _, _, ok := el.Next(); ok; _, _, ok = el.Next() {
			}
		}
	})
	if n != 0 {
		t.Errorf("iteration allocates %v times", n)
	}
}
