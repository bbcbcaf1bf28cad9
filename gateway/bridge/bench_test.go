package bridge

import (
	"encoding/json"
	"testing"

	"github.com/aep-gateway/aep-gateway/aep"
	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// The per-event CPU of each projection as its bridge runs it (without
// Kafka): the event as stored in, the bytes written (or sent) out, over
// the golden corpus at the default ceiling.
func BenchmarkProjection(b *testing.B) {
	golden := gatewaytest.FixtureLines(b, "../../aep/testdata/r-golden.jsonl")
	for _, c := range []struct {
		name string
		run  func([]byte) error
	}{
		{"cloudevents", func(ev []byte) error { _, _, err := CloudEvents.Project(ev, aep.CaptureMetadata); return err }},
		{"cloudevents-binary", func(ev []byte) error {
			out, _, err := CloudEventsBinary.Project(ev, aep.CaptureMetadata)
			if err == nil {
				_, _, err = CloudEventsBinary.Encode(out)
			}
			return err
		}},
		{"ocsf", func(ev []byte) error { _, _, err := OCSF.Project(ev, aep.CaptureMetadata); return err }},
		{"otlp", func(ev []byte) error {
			lr, err := aep.ToOTLPLog(ev, aep.CaptureMetadata)
			if err != nil {
				return err
			}
			if _, err = appendLogRecord(nil, lr); err != nil {
				return err
			}
			lr.Resource["aep.tenant"] = json.RawMessage(`"t1"`)
			_, err = appendAttributes(nil, lr.Resource)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := c.run(golden[i%len(golden)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
