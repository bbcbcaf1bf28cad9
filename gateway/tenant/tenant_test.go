package tenant_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aep-gateway/aep-gateway/gateway/tenant"
	"github.com/aep-gateway/aep-gateway/partitioning"
)

func TestParse(t *testing.T) {
	for _, ok := range []string{"a", "acme", "Acme_2-b"} {
		got, err := tenant.Parse(ok)
		if err != nil || got.String() != ok || got.IsZero() {
			t.Fatalf("Parse(%q) = %v, %v", ok, got, err)
		}
	}
	for _, bad := range []string{"", "a b", "a.b", "ü", string(make([]byte, partitioning.MaxTenantLen+1))} {
		if _, err := tenant.Parse(bad); !errors.Is(err, partitioning.ErrInvalidTenant) {
			t.Fatalf("Parse(%q) error %v, want ErrInvalidTenant", bad, err)
		}
	}
}

func TestContext(t *testing.T) {
	if _, ok := tenant.FromContext(context.Background()); ok {
		t.Fatal("an empty context carries no tenant")
	}
	if _, ok := tenant.FromContext(tenant.NewContext(context.Background(), tenant.Tenant{})); ok {
		t.Fatal("the zero tenant is no tenant")
	}
	want := tenant.MustParse("acme")
	got, ok := tenant.FromContext(tenant.NewContext(context.Background(), want))
	if !ok || got != want {
		t.Fatalf("FromContext = %v, %v", got, ok)
	}
}
