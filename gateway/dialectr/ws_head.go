package dialectr

import (
	"bytes"
	"unicode/utf8"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/internal/jsonscan"
)

// eventHead tells an emitter's event frame from the others without
// decoding it: ok is true when data is an object whose "type" is a string
// with a dot that names no command, id then being its "id" when that is a
// string ("" otherwise). The ingest behind it validates the whole frame.
//
// ok is false, and the frame takes encoding/json (handle), whenever the
// scan could disagree with it: a member name with an escape or one that
// matches "type" or "id" only when case is folded (encoding/json matches
// names case-insensitively), a type with an escape, a command, or bytes
// the scan cannot walk, a type or id that is not UTF-8. Of repeated names the last counts, as in
// encoding/json (the ingest then refuses the duplicate).
func eventHead(data []byte) (id string, ok bool) {
	start := jsonscan.SkipSpace(data, 0)
	it := jsonscan.Object(data, start)
	var typ, rawID []byte
	idString := false
	for m, more := it.Next(); more; m, more = it.Next() {
		name := m.RawName(data)
		switch {
		case string(name) == "type":
			v := data[m.Value:m.End]
			if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
				return "", false
			}
			typ = v[1 : len(v)-1]
		case string(name) == "id":
			v := data[m.Value:m.End]
			idString = len(v) >= 2 && v[0] == '"'
			rawID = v
		case bytes.IndexByte(name, '\\') >= 0 || bytes.EqualFold(name, []byte("type")) || bytes.EqualFold(name, []byte("id")):
			return "", false
		}
	}
	if it.End() < 0 || bytes.IndexByte(typ, '.') < 0 || !utf8.Valid(typ) || aep.IsCommandR(string(typ)) {
		return "", false
	}
	if idString && !utf8.Valid(rawID) { // encoding/json would replace bytes; text frames are UTF-8 anyway
		return "", false
	}
	if idString {
		if bytes.IndexByte(rawID, '\\') < 0 {
			id = string(rawID[1 : len(rawID)-1])
		} else {
			id = string(jsonscan.AppendUnescaped(nil, rawID[1:len(rawID)-1]))
		}
	}
	return id, true
}
