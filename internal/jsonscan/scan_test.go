package jsonscan

import (
	"testing"
	"unicode/utf8"
)

func TestSkipSpace(t *testing.T) {
	for _, tc := range []struct {
		in      string
		i, want int
	}{
		{"", 0, 0}, {" \t\r\nx", 0, 4}, {"x ", 0, 0}, {"x  ", 1, 3}, {"ab", 2, 2},
		{"ab", -1, -1}, {"ab", 5, 5}, {"\v x", 0, 0}, // \v is not JSON whitespace
	} {
		if got := SkipSpace([]byte(tc.in), tc.i); got != tc.want {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", tc.in, tc.i, got, tc.want)
		}
	}
	if got := string(TrimSpace([]byte(" \n a b\r\t"))); got != "a b" {
		t.Errorf("TrimSpace = %q", got)
	}
	if got := TrimSpace([]byte(" \n ")); len(got) != 0 {
		t.Errorf("TrimSpace of blanks = %q", got)
	}
}

func TestStringEnd(t *testing.T) {
	for _, tc := range []struct {
		in      string
		i, want int
	}{
		{`""`, 0, 2},
		{`"abc",`, 0, 5},
		{`"a\"b"`, 0, 6},
		{`"a\\"b"`, 0, 5},
		{`"\\\""`, 0, 6},
		{`x"é"`, 1, 5},
		{`"\u0022"`, 0, 8},
		// malformed
		{`"abc`, 0, -1},
		{`"abc\"`, 0, -1},
		{`"\`, 0, -1},
		{`abc"`, 0, -1}, // no quote at i
		{`""`, -1, -1},
		{`""`, 2, -1},
		{``, 0, -1},
	} {
		if got := StringEnd([]byte(tc.in), tc.i); got != tc.want {
			t.Errorf("StringEnd(%q, %d) = %d, want %d", tc.in, tc.i, got, tc.want)
		}
	}
}

func TestValueEnd(t *testing.T) {
	for _, tc := range []struct {
		in      string
		i, want int
	}{
		{`"s"`, 0, 3},
		{`12.5e3,`, 0, 6},
		{`-1}`, 0, 2},
		{`true]`, 0, 4},
		{`null `, 0, 4},
		{`false`, 0, 5},
		{`{}`, 0, 2},
		{`[]x`, 0, 2},
		{`{"a":[1,{"b":"}]"}],"c":"\"{"} ,`, 0, 30},
		{`[[[[[[[[[[]]]]]]]]]]`, 0, 20},
		{`[1, "]"]`, 0, 8},
		{`x[1]`, 1, 4},
		// malformed: not found
		{`{"a":1`, 0, -1},
		{`["]`, 0, -1},
		{`[[]`, 0, -1},
		{`"`, 0, -1},
		{`,1`, 0, -1},
		{`}`, 0, -1},
		{` 1`, 0, -1},
		{`1`, 1, -1},
		{`1`, -3, -1},
		{``, 0, -1},
		// malformed: an offset, no verdict
		{`[}`, 0, 2},
		{`tru"e",`, 0, 6},
	} {
		if got := ValueEnd([]byte(tc.in), tc.i); got != tc.want {
			t.Errorf("ValueEnd(%q, %d) = %d, want %d", tc.in, tc.i, got, tc.want)
		}
	}
}

func TestHex4(t *testing.T) {
	for _, tc := range []struct {
		in   string
		i    int
		want rune
		ok   bool
	}{
		{"00e9", 0, 0xE9, true}, {"x1aF0", 1, 0x1AF0, true}, {"FFFF", 0, 0xFFFF, true}, {"d83D", 0, 0xD83D, true},
		{"00g9", 0, 0, false}, {"123", 0, 0, false}, {"1234", 1, 0, false}, {"1234", -1, 0, false}, {"12 4", 0, 0, false},
	} {
		got, ok := Hex4([]byte(tc.in), tc.i)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Hex4(%q, %d) = %#x %v, want %#x %v", tc.in, tc.i, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		in   string
		i    int
		want rune
		n    int
	}{
		{`\"`, 0, '"', 2}, {`\\`, 0, '\\', 2}, {`\/`, 0, '/', 2}, {`\b`, 0, '\b', 2}, {`\f`, 0, '\f', 2},
		{`\n`, 0, '\n', 2}, {`\r`, 0, '\r', 2}, {`\t`, 0, '\t', 2},
		{`a\u00e9`, 1, 'é', 6},
		{`\u20AC!`, 0, '€', 6},
		{`\ud83d\ude00`, 0, '😀', 12},
		{`\uFFFD`, 0, utf8.RuneError, 6},
		// unpaired surrogates decode to U+FFFD, 6 bytes, as in encoding/json
		{`\ud83d`, 0, utf8.RuneError, 6},
		{`\ude00\ud83d`, 0, utf8.RuneError, 6},
		{`\ud83d\u0041`, 0, utf8.RuneError, 6},
		{`\ud83d\ud83d`, 0, utf8.RuneError, 6},
		{`\ud83d\ude0`, 0, utf8.RuneError, 6},
		{`\ud83dx\ude00`, 0, utf8.RuneError, 6},
		// no escape
		{`\x`, 0, 0, 0}, {`\u12`, 0, 0, 0}, {`\u12g4`, 0, 0, 0}, {`\`, 0, 0, 0}, {`a`, 0, 0, 0},
		{`\n`, 1, 0, 0}, {`\n`, -1, 0, 0}, {`\n`, 9, 0, 0}, {`\U00e9`, 0, 0, 0},
	} {
		got, n := Escape([]byte(tc.in), tc.i)
		if got != tc.want || n != tc.n {
			t.Errorf("Escape(%q, %d) = %q %d, want %q %d", tc.in, tc.i, got, n, tc.want, tc.n)
		}
	}
}

func TestAppendUnescaped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, ``},
		{`plain`, `plain`},
		{`r\u00e9sum\u00e9`, `résumé`},
		{`a\"b\\c\/d\b\f\n\r\t`, "a\"b\\c/d\b\f\n\r\t"},
		{`\ud83d\ude00!`, "😀!"},
		{`\ud83d-`, "\uFFFD-"},
		{`bad \x and \u12 end\`, `bad \x and \u12 end\`}, // kept as written
		{"raw \xff", "raw \xff"},                         // UTF-8 not checked
	} {
		if got := string(AppendUnescaped([]byte(">"), []byte(tc.in))); got != ">"+tc.want {
			t.Errorf("AppendUnescaped(%q) = %q, want %q", tc.in, got, ">"+tc.want)
		}
	}
}

func TestStringEquals(t *testing.T) {
	for _, tc := range []struct {
		lit, want string
		eq        bool
	}{
		{`"eu-1"`, "eu-1", true},
		{`"eu\u002d1"`, "eu-1", true},
		{`"eu\u002D1"`, "eu-2", false},
		{`"\ud83d\ude00"`, "😀", true},
		{`"\ud83d"`, "\uFFFD", true},
		{"\"\xff\"", "\uFFFD", true},
		{`"é"`, "é", true},
		{`""`, "", true},
		{`"a"`, "", false},
		{`""`, "a", false},
		{`"ab"`, "a", false},
		{`"a"`, "ab", false},
		{`"é"`, "e", false},
		{`"\n"`, "\n", true},
		{`"\x"`, `\x`, false},
		{`eu`, "eu", false},
		{`"`, "", false},
		{``, "", false},
	} {
		if got := StringEquals([]byte(tc.lit), tc.want); got != tc.eq {
			t.Errorf("StringEquals(%q, %q) = %v, want %v", tc.lit, tc.want, got, tc.eq)
		}
	}
}

func TestStringEqualsAllocs(t *testing.T) {
	lit := []byte(`"r\u00e9sum\u00e9 \ud83d\ude00"`)
	if n := testing.AllocsPerRun(100, func() { StringEquals(lit, "résumé 😀") }); n != 0 {
		t.Errorf("StringEquals allocates %v times", n)
	}
}
