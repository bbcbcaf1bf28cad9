package aep

import (
	"embed"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Payload validation (Limits.ValidatePayloads): the data of an R event whose
// type is registered in AEP-0002 is checked against the type's payload
// schema (schemas/r, vendored from the specification). The schemas use a
// small subset of JSON Schema 2020-12, and this file implements exactly that
// subset: type, enum, const, properties, required, items, minimum, maximum
// and if/then. format, titles, comments and x-aep-capture are annotations
// (the specification's own checker, conformance/run.py, runs
// Draft202012Validator without a format checker). A schema that uses any
// other keyword fails to compile, so an update of the vendored files cannot
// silently weaken validation (TestPayloadSchemasCompile).
//
// Validation walks the bytes the scan already validated; it builds no tree
// and allocates nothing unless a member name has escapes or the check fails.

//go:embed schemas/r/*.schema.json
var payloadSchemaFiles embed.FS

// JSON types a schema node admits, as a bit set.
const (
	tString uint8 = 1 << iota
	tNumber
	tInteger
	tObject
	tArray
	tBoolean
	tNull
)

// pnode is one compiled schema node.
type pnode struct {
	types    uint8    // 0: any type
	enum     []string // allowed values (every enum in the schemas is of strings); nil: any
	names    []string // properties, then required names that have no property schema
	props    []*pnode // schema of names[i] for i < len(props)
	required uint64   // bit i: names[i] is required
	items    *pnode
	min, max float64 // NaN: no bound
	ifNode   *pnode
	thenNode *pnode
}

// payloadSchemas maps a registered type to its compiled payload schema.
var payloadSchemas = sync.OnceValue(func() map[string]*pnode {
	m, err := compilePayloadSchemas()
	if err != nil {
		// The files are embedded and checked by the tests: this is a
		// build defect, not an input error.
		panic(err)
	}
	return m
})

func compilePayloadSchemas() (map[string]*pnode, error) {
	files, err := payloadSchemaFiles.ReadDir("schemas/r")
	if err != nil {
		return nil, fmt.Errorf("aep: payload schemas: %w", err)
	}
	out := make(map[string]*pnode, len(files))
	for _, f := range files {
		b, err := payloadSchemaFiles.ReadFile("schemas/r/" + f.Name())
		if err != nil {
			return nil, fmt.Errorf("aep: payload schema %s: %w", f.Name(), err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("aep: payload schema %s: %w", f.Name(), err)
		}
		n, err := compileNode(doc, "")
		if err != nil {
			return nil, fmt.Errorf("aep: payload schema %s: %w", f.Name(), err)
		}
		out[strings.TrimSuffix(f.Name(), ".schema.json")] = n
	}
	return out, nil
}

// annotations are keywords that never fail validation.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"x-aep-capture": true, "format": true, "examples": true, "default": true,
}

var typeBits = map[string]uint8{
	"string": tString, "number": tNumber, "integer": tInteger, "object": tObject,
	"array": tArray, "boolean": tBoolean, "null": tNull,
}

func compileNode(s map[string]any, at string) (*pnode, error) {
	n := &pnode{min: math.NaN(), max: math.NaN()}
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys) // properties before required
	for _, k := range keys {
		v := s[k]
		var err error
		switch k {
		case "type":
			n.types, err = compileTypes(v)
		case "enum":
			n.enum, err = compileEnum(v)
		case "const":
			n.enum, err = compileEnum([]any{v})
		case "properties":
			err = n.compileProps(v, at)
		case "required":
			err = n.compileRequired(v)
		case "items":
			n.items, err = compileSub(v, at+"[]")
		case "minimum", "maximum":
			x, ok := v.(float64)
			if !ok {
				err = fmt.Errorf("%s is not a number", k)
			} else if k == "minimum" {
				n.min = x
			} else {
				n.max = x
			}
		case "if":
			n.ifNode, err = compileSub(v, at)
		case "then":
			n.thenNode, err = compileSub(v, at)
		default:
			if !annotations[k] {
				err = fmt.Errorf("keyword %q is not implemented", k)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("at %q: %w", at, err)
		}
	}
	if (n.ifNode == nil) != (n.thenNode == nil) {
		return nil, fmt.Errorf("at %q: if without then (or then without if) is not implemented", at)
	}
	return n, nil
}

func compileSub(v any, at string) (*pnode, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("at %q: subschema is not an object", at)
	}
	return compileNode(m, at)
}

func compileTypes(v any) (uint8, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var bits uint8
	for _, t := range list {
		s, _ := t.(string)
		b, ok := typeBits[s]
		if !ok {
			return 0, fmt.Errorf("unknown type %v", t)
		}
		bits |= b
	}
	return bits, nil
}

func compileEnum(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("enum is not a non-empty array")
	}
	out := make([]string, len(list))
	for i, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("enum or const value %v is not a string", x)
		}
		out[i] = s
	}
	return out, nil
}

func (n *pnode) compileProps(v any, at string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("properties is not an object")
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		sub, err := compileSub(m[k], joinField(at, k))
		if err != nil {
			return err
		}
		n.names = append(n.names, k)
		n.props = append(n.props, sub)
	}
	return nil
}

func (n *pnode) compileRequired(v any) error {
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("required is not an array")
	}
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return fmt.Errorf("required name %v is not a string", x)
		}
		i := indexOf(n.names, s)
		if i < 0 {
			i = len(n.names)
			n.names = append(n.names, s)
		}
		if i >= 64 {
			return fmt.Errorf("more than 64 named members")
		}
		n.required |= 1 << i
	}
	return nil
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// joinField appends a member name to a field path: "cost" + "currency" =
// "cost.currency".
func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// payloadR checks the data member of an R event of type typ against the
// type's payload schema. Types without a schema (unregistered, vendor x.*,
// registered without a schema) and events without data pass: run.py checks
// only the data an event carries.
func (p *parser) payloadR(typ []byte) *failure {
	m := p.get(aData)
	if m == nil {
		return nil
	}
	n := payloadSchemas()[string(typ)]
	if n == nil {
		return nil
	}
	f := p.checkNode(n, span{start: m.start, end: m.end, kind: m.kind}, false)
	if f == nil {
		return nil
	}
	f.field = joinField("data", f.field)
	f.msg = f.field + " " + f.msg + " (AEP-0002 payload schema of " + string(typ) + ")"
	return f
}

// noMatch is what a quiet check returns on a mismatch: an if schema is
// evaluated for its outcome only, and building a message would allocate.
var noMatch = &failure{kind: KindInvalid, msg: "does not match", off: -1}

// checkNode validates v against n. A failure's field is the path below v;
// callers prefix their own segment on the way out. When quiet, a mismatch
// returns noMatch, which must not be modified.
func (p *parser) checkNode(n *pnode, v span, quiet bool) *failure {
	if n.types != 0 && !p.typeOK(n.types, v) {
		if quiet {
			return noMatch
		}
		return fail(KindInvalid, "", "must be "+typeList(n.types)+", not "+v.kind.String())
	}
	if n.enum != nil && !p.oneOf(v, n.enum) {
		if quiet {
			return noMatch
		}
		return fail(KindInvalid, "", "must be one of "+listOf(n.enum)+"; got "+quoteTrunc(p.raw(v)))
	}
	if v.kind == vNumber && (!math.IsNaN(n.min) || !math.IsNaN(n.max)) {
		x := numberValue(p.raw(v))
		if x < n.min || x > n.max || math.IsNaN(x) {
			if quiet {
				return noMatch
			}
			return fail(KindInvalid, "", "must be a number "+boundsText(n.min, n.max)+"; got "+quoteTrunc(p.raw(v)))
		}
	}
	switch v.kind {
	case vObject:
		if f := p.checkObject(n, v, quiet); f != nil {
			return f
		}
	case vArray:
		if n.items != nil {
			it := p.elements(v.start)
			for i := 0; ; i++ {
				e, ok := it.next()
				if !ok {
					break
				}
				if f := p.checkNode(n.items, e, quiet); f != nil {
					if quiet {
						return f
					}
					f.field = "[" + strconv.Itoa(i) + "]" + dotted(f.field)
					return f
				}
			}
		}
	}
	if n.ifNode != nil && p.checkNode(n.ifNode, v, true) == nil {
		return p.checkNode(n.thenNode, v, quiet)
	}
	return nil
}

func (p *parser) checkObject(n *pnode, v span, quiet bool) *failure {
	if len(n.names) == 0 {
		return nil
	}
	var seen uint64
	it := p.members(v.start)
	for {
		name, mv, ok := it.next()
		if !ok {
			break
		}
		i := indexOf(n.names, string(name))
		if i < 0 {
			continue
		}
		seen |= 1 << i
		if i < len(n.props) {
			if f := p.checkNode(n.props[i], mv, quiet); f != nil {
				if quiet {
					return f
				}
				f.field = string(name) + dotted(f.field)
				return f
			}
		}
	}
	if missing := n.required &^ seen; missing != 0 {
		if quiet {
			return noMatch
		}
		for i := range n.names {
			if missing&(1<<i) != 0 {
				return fail(KindInvalid, n.names[i], "is required")
			}
		}
	}
	return nil
}

// dotted prefixes a member path with a dot, so that it can follow a name or
// an index: "cost" + dotted("currency"), "fields" + dotted("[0].choices").
func dotted(field string) string {
	if field == "" || field[0] == '[' {
		return field
	}
	return "." + field
}

func (p *parser) typeOK(types uint8, v span) bool {
	switch v.kind {
	case vString:
		return types&tString != 0
	case vNumber:
		return types&tNumber != 0 || (types&tInteger != 0 && isIntegral(p.raw(v)))
	case vObject:
		return types&tObject != 0
	case vArray:
		return types&tArray != 0
	case vTrue, vFalse:
		return types&tBoolean != 0
	case vNull:
		return types&tNull != 0
	}
	return false
}

func typeList(types uint8) string {
	var names []string
	for _, t := range [...]struct {
		bit  uint8
		name string
	}{{tString, "a string"}, {tNumber, "a number"}, {tInteger, "an integer"}, {tObject, "an object"},
		{tArray, "an array"}, {tBoolean, "a boolean"}, {tNull, "null"}} {
		if types&t.bit != 0 {
			names = append(names, t.name)
		}
	}
	return strings.Join(names, " or ")
}

func boundsText(min, max float64) string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch {
	case math.IsNaN(max):
		return ">= " + f(min)
	case math.IsNaN(min):
		return "<= " + f(max)
	}
	return "from " + f(min) + " to " + f(max)
}
