package dialectr_test

import (
	"net/http"

	"github.com/aep-gateway/aep-gateway/gateway/gatewaytest"
)

// dialWS connects to /socket and, when hello is not empty, sends it and
// requires the server's hello back.
func (e *env) dialWS(hello string) *gatewaytest.WSR {
	e.t.Helper()
	return e.dialWSAs("", hello)
}

// dialWSAs is dialWS with a bearer token.
func (e *env) dialWSAs(token, hello string) *gatewaytest.WSR {
	e.t.Helper()
	o := gatewaytest.WSOptions{Buffer: 1024}
	if token != "" {
		o.Header = http.Header{"Authorization": {"Bearer " + token}}
	}
	return gatewaytest.DialWSR(e.t, gatewaytest.WSURL(e.url, "/socket"), hello, o)
}

// consumerHello is the hello of a consumer-only client.
const consumerHello = `{"type":"hello","versions":["0.1"],"role":"consumer","identity":{"agent":"test-consumer"}}`
