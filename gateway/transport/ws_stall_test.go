package transport_test

import (
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/aep-gateway/aep-gateway/gateway/transport"
)

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// A client that announces a large frame and sends almost nothing of it
// costs the server what arrived, not what was announced: 500 clients
// announcing 512 KiB frames (under the 1 MiB read limit) and stalling
// after 10 bytes hold well under 64 KiB of heap each (they held the whole
// 512 KiB each when the frame was allocated from its header).
func TestStalledLargeFramesCostWhatArrived(t *testing.T) {
	addr := echoServer(t, 1<<20)
	const n, announced = 500, 512 << 10
	before := heapInUse()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, _ := dialRaw(t, addr, "")
		// a masked binary frame announcing 512 KiB, then 10 bytes of it
		hdr := binary.BigEndian.AppendUint64([]byte{0x82, 0x80 | 127}, announced)
		hdr = append(hdr, 1, 2, 3, 4) // mask key
		if _, err := c.nc.Write(append(hdr, make([]byte, 10)...)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c.nc)
	}
	// The server has read the headers once its heap stops growing; poll
	// until two readings agree within 1 %.
	var after uint64
	for deadline, prev := time.Now().Add(10*time.Second), uint64(0); ; prev = after {
		time.Sleep(50 * time.Millisecond)
		after = heapInUse()
		if prev != 0 && after < prev+prev/100 && after+after/100 > prev {
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	perConn := (int64(after) - int64(before)) / n
	t.Logf("%d stalled clients announcing %d KiB: %d B of heap each (both ends)", n, announced>>10, perConn)
	if perConn > 64<<10 {
		t.Fatalf("%d B of heap per stalled client, want under 64 KiB: the announced length was allocated", perConn)
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// A frame stalled past its first part (minChunk, 16 KiB) ends the read
// within the connection's ReadTimeout, in Serve's goroutine too.
func TestStalledFrameEndsServeWithinReadTimeout(t *testing.T) {
	url, served := wsServer(t, transport.WSConfig{ReadTimeout: 100 * time.Millisecond},
		func(*transport.Conn) func(websocket.MessageType, []byte) bool {
			return func(websocket.MessageType, []byte) bool { return true }
		})
	c, _ := dialRaw(t, strings.TrimPrefix(url, "ws://"), "")
	const announced = 30 << 10 // under the 32 KiB read limit
	hdr := binary.BigEndian.AppendUint16([]byte{0x82, 0x80 | 126}, announced)
	hdr = append(hdr, 1, 2, 3, 4)
	if _, err := c.nc.Write(append(hdr, make([]byte, 17<<10)...)); err != nil {
		t.Fatal(err)
	}
	waitServed(t, served)
}

// Payloads longer than one part (16 KiB) are read whole and unmasked
// right, in one frame or in fragments of several parts each.
func TestLargePayloadsReadInParts(t *testing.T) {
	addr := echoServer(t, 1<<20)
	c, _ := dialRaw(t, addr, "")
	big := make([]byte, 100<<10+7)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	c.frame(true, 0x1, big, true)
	c.wantFrame(0x1, "MessageText:"+string(big))
	c.frame(false, 0x2, big[:40<<10], true)
	c.frame(false, 0x0, big[40<<10:41<<10], true)
	c.frame(true, 0x0, big[41<<10:], true)
	c.wantFrame(0x1, "MessageBinary:"+string(big))
}
