package gatewaytest

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/aep-gateway/aep-gateway/filtering"
	"github.com/aep-gateway/aep-gateway/gateway/tenant"
)

// FilterD parses a dialect D filter from its query form
// ("types=task.*&session_id=s"), failing tb when it does not parse.
func FilterD(tb testing.TB, query string) *filtering.Filter {
	tb.Helper()
	v, err := url.ParseQuery(query)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := filtering.ParseDQuery(v)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// WithTenant serves h as the gateway's authentication would: with the
// tenant named in the request's context.
func WithTenant(name string, h http.Handler) http.Handler {
	t := tenant.MustParse(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(tenant.NewContext(r.Context(), t)))
	})
}
