package database_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pgx encodes a Go []string bound to a uuid[] parameter only after its
// binary encoding fails, and the failure formats the whole slice into an
// error it throws away: on a page of a thousand ids that was a tenth of a
// catch-up's CPU. Hearth's queries bind such slices as text[] and cast
// ($1::text[]::uuid[]), which encodes at once; this test keeps it so.
func TestUUIDArrayParametersAreBoundAsText(t *testing.T) {
	bare := regexp.MustCompile(`\$[0-9]+::uuid\[\]`)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range bare.FindAll(src, -1) {
			t.Errorf("%s: %s binds a uuid[] parameter directly; write %s (see this test)", path, m,
				strings.Replace(string(m), "::uuid[]", "::text[]::uuid[]", 1))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
