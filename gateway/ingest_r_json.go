package gateway

import "strconv"

// appendJSON appends resp as encoding/json writes it (same members, same
// order, same escaping), without reflection: the positions of a large batch
// are most of the response.
func (resp *rAccepted) appendJSON(dst []byte) ([]byte, error) {
	dst = append(dst, `{"accepted":`...)
	dst = strconv.AppendInt(dst, int64(resp.Accepted), 10)
	dst = append(dst, `,"topic":`...)
	dst = appendJSONString(dst, resp.Topic)
	dst = append(dst, `,"positions":`...)
	dst = appendRPositions(dst, resp.Positions)
	if len(resp.Diagnostics) > 0 {
		dst = append(dst, `,"diagnostics":[`...)
		for i, d := range resp.Diagnostics {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, d)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// appendRPositions appends ps as encoding/json writes a []rPosition.
func appendRPositions(dst []byte, ps []rPosition) []byte {
	if ps == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i := range ps {
		p := &ps[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(p.Index), 10)
		dst = append(dst, `,"line":`...)
		dst = strconv.AppendInt(dst, int64(p.Line), 10)
		dst = appendPlace(dst, p.Partition, p.Offset, p.Reused)
	}
	return append(dst, ']')
}

// appendPlace appends the members every position ends with, and closes it:
// ,"partition":P,"offset":O[,"reused_offset":true]}.
func appendPlace(dst []byte, partition int32, offset int64, reused bool) []byte {
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, offset, 10)
	if reused {
		dst = append(dst, `,"reused_offset":true`...)
	}
	return append(dst, '}')
}
