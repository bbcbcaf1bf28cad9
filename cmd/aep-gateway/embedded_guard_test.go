package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestPrivateDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	seg := filepath.Join(dir, "kafka", "topic-0", "00000.seg")
	if err := os.MkdirAll(filepath.Dir(seg), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{seg, filepath.Join(dir, "offsets.json"), filepath.Join(dir, "notes.txt")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := privateDataDir(dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{
		dir: 0o700, filepath.Join(dir, "kafka"): 0o700, filepath.Dir(seg): 0o700, seg: 0o600,
		filepath.Join(dir, "offsets.json"): 0o600,
		filepath.Join(dir, "notes.txt"):    0o644, // not the gateway's: left alone
	}
	for p, m := range want {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != m {
			t.Errorf("%s: %o, want %o", p, st.Mode().Perm(), m)
		}
	}
	// Files created from now on are private whatever mode they ask for.
	later := filepath.Join(dir, "kafka", "later.seg")
	if err := os.WriteFile(later, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(later); st.Mode().Perm() != 0o600 {
		t.Errorf("file created after start: %o, want 600", st.Mode().Perm())
	}
}
