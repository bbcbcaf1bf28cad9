package filtering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
)

// jkind is the JSON type of a parsed filter value.
type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// jval is a small JSON tree. Filters are bounded by Limits.MaxBytes, so the
// parsers work on a tree rather than a token stream; the tree keeps object
// members in document order and refuses duplicate member names (JSON
// decoders disagree on which duplicate wins, so a filter never relies on it).
type jval struct {
	kind jkind
	b    bool
	s    string // string value, or number literal
	arr  []jval
	obj  []jmember
}

type jmember struct {
	key string
	val jval
}

// maxDepth bounds nesting; no filter member needs more than 3 levels.
const maxDepth = 16

// parseJSON decodes one JSON value filling the whole input. It returns a
// message saying what is wrong, or "".
func parseJSON(data []byte, lim Limits) (jval, string) {
	if len(data) > lim.MaxBytes {
		return jval{}, "limit: filter is larger than " + itoa(lim.MaxBytes) + " bytes"
	}
	if !utf8.Valid(data) {
		return jval{}, "filter is not valid UTF-8"
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return jval{}, err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return jval{}, "filter has data after the JSON value"
	}
	return v, ""
}

var errDepth = errors.New("filter is nested too deeply")

func readValue(dec *json.Decoder, depth int) (jval, error) {
	if depth > maxDepth {
		return jval{}, errDepth
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return jval{}, errors.New("filter is not valid JSON: unexpected end of input")
		}
		return jval{}, errors.New("filter is not valid JSON: " + err.Error())
	}
	switch t := tok.(type) {
	case nil:
		return jval{kind: jNull}, nil
	case bool:
		return jval{kind: jBool, b: t}, nil
	case json.Number:
		return jval{kind: jNumber, s: string(t)}, nil
	case string:
		return jval{kind: jString, s: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := jval{kind: jArray, arr: []jval{}}
			for dec.More() {
				e, err := readValue(dec, depth+1)
				if err != nil {
					return jval{}, err
				}
				v.arr = append(v.arr, e)
			}
			if _, err := dec.Token(); err != nil {
				return jval{}, errors.New("filter is not valid JSON: " + err.Error())
			}
			return v, nil
		case '{':
			v := jval{kind: jObject, obj: []jmember{}}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jval{}, errors.New("filter is not valid JSON: " + err.Error())
				}
				k, _ := kt.(string)
				if seen[k] {
					return jval{}, errors.New("member " + quote(k) + " appears more than once")
				}
				seen[k] = true
				e, err := readValue(dec, depth+1)
				if err != nil {
					return jval{}, err
				}
				v.obj = append(v.obj, jmember{key: k, val: e})
			}
			if _, err := dec.Token(); err != nil {
				return jval{}, errors.New("filter is not valid JSON: " + err.Error())
			}
			return v, nil
		}
	}
	return jval{}, errors.New("filter is not valid JSON")
}

// checkValue applies the rules every filter string obeys: non-empty,
// bounded length, valid UTF-8.
func checkValue(s string, lim Limits) string {
	if s == "" {
		return "empty string is not a valid value"
	}
	if len(s) > lim.MaxValueLen {
		return "limit: value is longer than " + itoa(lim.MaxValueLen) + " bytes"
	}
	if !utf8.ValidString(s) {
		return "value is not valid UTF-8"
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }

// quote quotes s for a message, shortening long values.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "..."
	}
	return strconv.Quote(s)
}

// isLimitMsg reports whether a message is about a limit (prefixed "limit: ").
func isLimitMsg(m string) bool { return len(m) >= 7 && m[:7] == "limit: " }
