package cursor

import (
	"errors"
	"testing"
)

func TestPositionCompare(t *testing.T) {
	cases := []struct {
		a, b Position
		want int
	}{
		{Position{Epoch: 0, Seq: 1}, Position{Epoch: 0, Seq: 2}, -1},
		{Position{Epoch: 1, Seq: 0}, Position{Epoch: 0, Seq: 900}, 1}, // epoch bump is a new counter
		{Position{Epoch: 2, Seq: 7}, Position{Epoch: 2, Seq: 7}, 0},
		{Position{Epoch: 0, Seq: 10}, Position{Epoch: 0, Seq: 3}, 1},
	}
	for _, tc := range cases {
		if got := tc.a.Compare(tc.b); got != tc.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.After(tc.a.Epoch, tc.a.Seq); got != (tc.want > 0) {
			t.Errorf("%v.After(%v) = %v", tc.b, tc.a, got)
		}
	}
}

func TestParsePosition(t *testing.T) {
	cases := []struct {
		in   string
		want Position
		ok   bool
	}{
		{"s_8f2c:3:187", Position{"s_8f2c", 3, 187}, true},
		{"a:b:c:0:0", Position{"a:b:c", 0, 0}, true},
		{"s:0:9223372036854775807", Position{"s", 0, 1<<63 - 1}, true},
		{"s:0:9223372036854775808", Position{}, false},
		{"s:1", Position{}, false},
		{":1:2", Position{}, false},
		{"s:-1:2", Position{}, false},
		{"s:+1:2", Position{}, false},
		{"s:01:2", Position{}, false},
		{"s:1:", Position{}, false},
		{"s:1:2 ", Position{}, false},
		{"", Position{}, false},
	}
	for _, tc := range cases {
		got, err := ParsePosition(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParsePosition(%q) = %+v, %v", tc.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("ParsePosition(%q): %v does not wrap ErrMalformed", tc.in, err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

func FuzzParsePosition(f *testing.F) {
	f.Add("s_8f2c:3:187")
	f.Add("a:b:0:0")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if p.String() != s {
			t.Fatalf("%q parsed to %+v, prints %q", s, p, p.String())
		}
	})
}
