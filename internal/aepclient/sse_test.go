package aepclient

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	in := ": stream open\n\nid: c1\nevent: task.progress\ndata: {\"a\":1}\n\n" +
		"event: ignored-without-data\n\n" +
		"data: line1\r\ndata: line2\r\n\r\n" +
		": heartbeat\n" +
		"data: cut by the end"
	r := NewSSEReader(strings.NewReader(in))
	var got []SSEMessage
	for {
		m, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	want := []SSEMessage{
		{Comment: "stream open"},
		{Event: "task.progress", ID: "c1", Data: []byte(`{"a":1}`)},
		{Data: []byte("line1\nline2")},
		{Comment: "heartbeat"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].Event != want[i].Event || got[i].ID != want[i].ID || !bytes.Equal(got[i].Data, want[i].Data) || got[i].Comment != want[i].Comment {
			t.Errorf("message %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	r = NewSSEReader(strings.NewReader("data: " + strings.Repeat("x", 100) + "\n\n"))
	r.max = 50
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("long line: %v", err)
	}
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("id: 1\nevent: x\ndata: y\n\n: c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewSSEReader(bytes.NewReader(b))
		r.max = 1 << 10
		for range 1000 {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
}
