package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/harness"
	httpport "hearth/ports/http"
)

// document is the OpenAPI document the client is generated from, relative
// to this package.
const document = "../ports/http/openapi.json"

// generate runs doc.go's go:generate command, the one `go generate ./client`
// runs, on spec with its output to out.
func generate(t *testing.T, spec, out string) {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var args []string
	for line := range strings.Lines(string(src)) {
		if rest, ok := strings.CutPrefix(line, "//go:generate "); ok {
			args = strings.Fields(rest)
		}
	}
	require.NotEmpty(t, args, "doc.go has a go:generate line")
	require.Equal(t, document, args[len(args)-1], "the go:generate line ends with the document")
	o := slices.Index(args, "-o")
	require.Positive(t, o, "the go:generate line names its output with -o")
	args[o+1] = out
	args[len(args)-1] = spec
	run(t, "", args[0], args[1:]...)
}

// The committed client is what the document generates: a document changed
// without `go generate ./client` fails here.
func TestClientIsGenerated(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "client.gen.go")
	generate(t, document, out)
	want, err := os.ReadFile(out)
	require.NoError(t, err)
	got, err := os.ReadFile("client.gen.go")
	require.NoError(t, err)
	if !bytes.Equal(want, got) {
		line, w, g := firstDifference(string(want), string(got))
		t.Fatalf("client/client.gen.go is not what %s generates (line %d: generated %q, committed %q): run `go generate ./client` and commit the result",
			document, line, w, g)
	}
}

// The 3.0 form served at /openapi-3.0.json generates the same client as
// the 3.1 source: the same declarations. Only comments may differ (3.0
// keeps one example and no description beside a $ref), and webhooks, which
// 3.0 cannot declare (they become x-webhooks): the 3.1 source is generated
// without them here, since oapi-codegen adds their request types and a
// WebhookInitiator for them.
func TestOpenAPI30GeneratesTheSameClient(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc, err := httpport.OpenAPI30()
	require.NoError(t, err)
	spec30 := filepath.Join(dir, "openapi-3.0.json")
	require.NoError(t, os.WriteFile(spec30, doc, 0o644))

	src, err := os.ReadFile(document)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	var source map[string]any
	require.NoError(t, dec.Decode(&source))
	delete(source, "webhooks")
	withoutWebhooks, err := json.Marshal(source)
	require.NoError(t, err)
	spec31 := filepath.Join(dir, "openapi.json")
	require.NoError(t, os.WriteFile(spec31, withoutWebhooks, 0o644))

	generate(t, spec30, filepath.Join(dir, "from30.go"))
	generate(t, spec31, filepath.Join(dir, "from31.go"))
	from30, err := os.ReadFile(filepath.Join(dir, "from30.go"))
	require.NoError(t, err)
	from31, err := os.ReadFile(filepath.Join(dir, "from31.go"))
	require.NoError(t, err)
	want, got := withoutComments(t, from31), withoutComments(t, from30)
	if want != got {
		line, w, g := firstDifference(want, got)
		t.Fatalf("the 3.0 form generates another client (line %d without comments: from 3.1 %q, from 3.0 %q): ports/http/openapi30.go changes what the document means",
			line, w, g)
	}
}

// withoutComments is Go source printed again without its comments.
func withoutComments(t *testing.T, src []byte) string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "client.gen.go", src, parser.SkipObjectResolution)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, format.Node(&out, fset, file))
	return out.String()
}

// firstDifference is the first line (from 1) where a and b differ, and
// that line of each.
func firstDifference(a, b string) (int, string, string) {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return i + 1, x, y
		}
	}
	return 0, "", ""
}

// TypeScript clients generate their types from the document with
// openapi-typescript; a file that uses them as a client would
// (testdata/typescript/check.ts) must compile with tsc against the types of
// the 3.1 source and of the 3.0 form. The versions are pinned in
// testdata/typescript/package-lock.json. Without npm the check installs
// Debian's nodejs and npm itself, as the Postgres and NATS harnesses install
// their servers (as root with apt-get; elsewhere it fails and says what to
// install): it is part of `make test`.
func TestTypeScriptTypesCompile(t *testing.T) {
	t.Parallel()
	pkg, err := filepath.Abs(filepath.Join("testdata", "typescript"))
	require.NoError(t, err)
	npmInstall(t, pkg)
	doc30, err := httpport.OpenAPI30()
	require.NoError(t, err)
	spec30 := filepath.Join(t.TempDir(), "openapi-3.0.json")
	require.NoError(t, os.WriteFile(spec30, doc30, 0o644))

	for name, spec := range map[string]string{"3.1": document, "3.0": spec30} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, f := range []string{"check.ts", "tsconfig.json"} {
				src, err := os.ReadFile(filepath.Join(pkg, f))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dir, f), src, 0o644))
			}
			run(t, "", filepath.Join(pkg, "node_modules", ".bin", "openapi-typescript"), spec, "-o", filepath.Join(dir, "hearth.d.ts"))
			run(t, "", filepath.Join(pkg, "node_modules", ".bin", "tsc"), "-p", filepath.Join(dir, "tsconfig.json"))
		})
	}
}

// npmInstall installs the pinned packages of dir unless node_modules
// already holds what package-lock.json says (.ci/run runs npm ci first).
func npmInstall(t *testing.T, dir string) {
	t.Helper()
	_, err := harness.Ensure(context.Background(), "npm", "nodejs", "npm")
	require.NoError(t, err, "the TypeScript check needs Node.js and npm")
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	require.NoError(t, err)
	installed, err := os.ReadFile(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err == nil && sameLockedPackages(t, lock, installed) {
		return
	}
	run(t, dir, "npm", "ci", "--no-audit", "--no-fund")
}

// sameLockedPackages reports whether the hidden lockfile npm wrote into
// node_modules has every package of package-lock.json at its version.
func sameLockedPackages(t *testing.T, lock, installed []byte) bool {
	t.Helper()
	type lockfile struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	var want, got lockfile
	require.NoError(t, json.Unmarshal(lock, &want))
	if json.Unmarshal(installed, &got) != nil {
		return false
	}
	for path, p := range want.Packages {
		if path != "" && got.Packages[path].Version != p.Version {
			return false
		}
	}
	return true
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}
