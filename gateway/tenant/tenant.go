// Package tenant is the identity every request of the gateway runs under:
// a Tenant is a validated tenant name, made once at authentication
// (Parse), carried in the request's context (NewContext, FromContext) and
// taken as it is by everything below the HTTP layer (the delivery engine,
// the bindings), which therefore never validates a tenant name again.
//
// A Tenant is a small immutable value, safe to copy and to use from any
// goroutine.
package tenant

import (
	"context"

	"github.com/aep-gateway/aep-gateway/gateway/principal"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

// Tenant is a validated tenant name (partitioning.ValidateTenant), with
// the principal inside it that the request's credential names. The zero
// value is "no tenant": IsZero reports it, and nothing accepts it. Compare
// tenants by String: two principals of one tenant are one tenant.
type Tenant struct {
	name string
	p    *principal.Principal
}

// WithPrincipal returns t speaking as p.
func (t Tenant) WithPrincipal(p *principal.Principal) Tenant {
	t.p = p
	return t
}

// Principal is who inside the tenant speaks: nil is the tenant-wide
// default (development mode, or a credential made before principals),
// which every check allows.
func (t Tenant) Principal() *principal.Principal { return t.p }

// Parse validates name and returns its Tenant; the error wraps
// partitioning.ErrInvalidTenant.
func Parse(name string) (Tenant, error) {
	if err := partitioning.ValidateTenant(name); err != nil {
		return Tenant{}, err
	}
	return Tenant{name: name}, nil // tenant-wide until WithPrincipal
}

// MustParse is Parse for names known to be valid (constants, tests); it
// panics on an invalid one.
func MustParse(name string) Tenant {
	t, err := Parse(name)
	if err != nil {
		panic(err)
	}
	return t
}

// String is the tenant's name.
func (t Tenant) String() string { return t.name }

// IsZero reports whether t is the zero value (no tenant).
func (t Tenant) IsZero() bool { return t.name == "" }

type ctxKey struct{}

// NewContext returns ctx carrying t.
func NewContext(ctx context.Context, t Tenant) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the tenant ctx carries; ok is false when it carries
// none (a handler not mounted behind authentication).
func FromContext(ctx context.Context) (t Tenant, ok bool) {
	t, ok = ctx.Value(ctxKey{}).(Tenant)
	return t, ok && !t.IsZero()
}
