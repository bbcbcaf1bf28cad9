package buildinfo

import (
	"os"
	"strings"
	"testing"
)

func TestReleaseIsTheVERSIONFile(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if v := strings.TrimSpace(string(b)); v != Release {
		t.Fatalf("buildinfo.Release = %q, VERSION says %q: change both", Release, v)
	}
}

func TestReadNeverEmpty(t *testing.T) {
	in := Read("", "")
	if in.Version == "" || in.Version == "(devel)" || in.Revision == "" || in.GoVersion == "" {
		t.Fatalf("Read = %+v", in)
	}
	if in := Read("v9", "abc"); in.Version != "v9" || in.Revision != "abc" {
		t.Fatalf("stamps not kept: %+v", in)
	}
}
