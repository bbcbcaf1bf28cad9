// Package jsonscan is the one implementation of the byte-level JSON
// primitives the gateway's tree-free readers share: skipping whitespace,
// finding the end of a string or of a value, iterating over the members of
// an object or the elements of an array, and decoding escapes (\uXXXX and
// surrogate pairs included).
//
// Nothing here validates. The users either validated the bytes first (aep's
// envelope scanner checks syntax, UTF-8 and depth, then walks the values it
// accepted with these functions; aep's validating scanner also takes its
// whitespace and escape decoding from here) or read bytes that were
// validated at ingest and must only cope with the rest (the dialect D
// stream binding replacing a delivery member, filtering comparing an
// extension value). So every function states its contract in two parts:
//
//   - what it returns when its input is what it assumes (valid JSON where
//     it says so): then the result is exact, and the fuzz tests hold it
//     against encoding/json;
//   - what it returns otherwise: a documented "not found" value (-1, 0,
//     false) or some in-range offset that is no verdict on validity. No
//     function panics or reads outside the slice it is given, whatever the
//     bytes and whatever the offset passed in, negative or past the end.
//
// Every function is pure and safe for concurrent use. None allocates except
// [AppendUnescaped], which grows dst like append.
package jsonscan
