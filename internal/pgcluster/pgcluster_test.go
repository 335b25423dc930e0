package pgcluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"hearth/internal/harness"
)

// startCluster starts a cluster for a test, skipping the test when no server
// binaries are installed, and stops it when the test ends.
func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts.Fast = true
	opts.Log = slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err := Start(ctx, opts)
	if errors.Is(err, errNotFound) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop in cleanup: %v", err)
		}
	})
	return c
}

// psql runs a query with psql and returns its unaligned output, or skips
// the calling test's psql checks (returning "", false) when psql is missing.
func psql(t *testing.T, c *Cluster, query string) (string, bool) {
	t.Helper()
	path, err := exec.LookPath("psql")
	if err != nil {
		t.Log("psql not installed: skipping query", query)
		return "", false
	}
	out, err := exec.Command(path, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", c.URL("postgres"), "-c", query).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", query, err, out)
	}
	return strings.TrimSpace(string(out)), true
}

func TestTemporaryCluster(t *testing.T) {
	c := startCluster(t, Options{})
	dir := c.dir
	if !c.temp {
		t.Fatalf("cluster in %s not marked temporary", dir)
	}
	if want := filepath.Join(dir, "data"); c.DataDir() != want {
		t.Errorf("DataDir() = %q, want %q", c.DataDir(), want)
	}

	wantURL := regexp.MustCompile(`^postgres://postgres@127\.0\.0\.1:(\d+)/app\?sslmode=disable$`)
	m := wantURL.FindStringSubmatch(c.URL("app"))
	if m == nil {
		t.Fatalf("URL(app) = %q, does not match %s", c.URL("app"), wantURL)
	}
	if m[1] != strconv.Itoa(c.Port()) || c.Port() <= 0 {
		t.Errorf("URL port %s, Port() %d", m[1], c.Port())
	}

	if out, ok := psql(t, c, "select 1"); ok && out != "1" {
		t.Errorf("select 1 = %q", out)
	}
	if out, ok := psql(t, c, "show fsync"); ok && out != "off" {
		t.Errorf("fsync = %q, want off with Fast", out)
	}

	pid, err := c.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	port := c.Port()
	if err := c.Restart(context.Background(), "fast"); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	newPID, err := c.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	if newPID == pid {
		t.Errorf("postmaster pid unchanged (%d) after Restart", pid)
	}
	if c.Port() != port {
		t.Errorf("port changed from %d to %d by Restart", port, c.Port())
	}
	if out, ok := psql(t, c, "select 2"); ok && out != "2" {
		t.Errorf("select 2 after restart = %q", out)
	}
	if err := c.Restart(context.Background(), "bogus"); err == nil {
		t.Error("Restart with an invalid mode succeeded")
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s still there after Stop (stat: %v)", dir, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := c.Restart(context.Background(), "fast"); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

func TestClusterInDir(t *testing.T) {
	base := t.TempDir()
	// The test's temporary directory is created 0700 by root; open it up so
	// that the postgres OS user can reach the cluster directory.
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "pg")

	c := startCluster(t, Options{Dir: dir})
	if c.DataDir() != filepath.Join(dir, "data") || c.temp {
		t.Fatalf("DataDir() = %q (temp %v), want %q", c.DataDir(), c.temp, filepath.Join(dir, "data"))
	}
	_, havePsql := psql(t, c, "create table marker (id int)")
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("Stop removed a cluster in a caller's directory: %v", err)
	}

	// Without Fresh the existing cluster is reused.
	c = startCluster(t, Options{Dir: dir})
	if out, _ := psql(t, c, "select to_regclass('marker') is not null"); havePsql && out != "t" {
		t.Errorf("table marker missing after restart on an existing cluster (got %q)", out)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	// Fresh starts over.
	c = startCluster(t, Options{Dir: dir, Fresh: true})
	if out, _ := psql(t, c, "select to_regclass('marker') is null"); havePsql && out != "t" {
		t.Errorf("table marker still there with Fresh (got %q)", out)
	}
}

func TestLeftoverServerIsStopped(t *testing.T) {
	base := t.TempDir()
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "pg")
	first := startCluster(t, Options{Dir: dir})
	firstPID, err := first.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a process that died without Stop: start again on the same Dir.
	second := startCluster(t, Options{Dir: dir})
	secondPID, err := second.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	if secondPID == firstPID {
		t.Errorf("leftover postmaster %d still in use", firstPID)
	}
	if out, ok := psql(t, second, "select 1"); ok && out != "1" {
		t.Errorf("select 1 = %q", out)
	}
}

func TestUnreachableDirFallsBackToTemp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another OS user")
	}
	// t.TempDir's parent is 0700 root: not traversable by the postgres user.
	requested := filepath.Join(t.TempDir(), "pg")
	c := startCluster(t, Options{Dir: requested})
	if strings.HasPrefix(c.DataDir(), requested) || !c.temp {
		t.Fatalf("DataDir() = %q (temp %v), want a temporary directory instead of %s", c.DataDir(), c.temp, requested)
	}
	dir := c.dir
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fallback directory %s still there after Stop", dir)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, pair := range [][2]string{{"16", "15"}, {"10", "9.6"}, {"9.6", "x"}, {"15.1", "15"}} {
		if compareVersions(pair[0], pair[1]) <= 0 {
			t.Errorf("compareVersions(%s, %s) <= 0, want > 0", pair[0], pair[1])
		}
	}
}

// startChildDir is set in the environment of this test binary run again as
// another user: TestStartChild then only starts a fresh cluster there.
const startChildDir = "HEARTH_PGCLUSTER_CHILD_DIR"

func TestStartChild(t *testing.T) {
	dir := os.Getenv(startChildDir)
	if dir == "" {
		t.Skip("run by TestFreshClusterLeftByRootTellsWhatToDo as a child")
	}
	c, err := Start(context.Background(), Options{Dir: dir, Fresh: true, Fast: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// A run as root (sudo make run) leaves the cluster's folder to the
// postgres OS user; the next run as oneself cannot remove it. It must say
// whose it is and how to remove it, not only "permission denied".
func TestFreshClusterLeftByRootTellsWhatToDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can leave a cluster to another user")
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		t.Skip("no runuser")
	}
	base := t.TempDir()
	require := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	require(os.Chmod(filepath.Dir(base), 0o755))
	require(os.Chmod(base, 0o777))
	// The folder as a root run leaves it: the cluster directory and its
	// data the postgres user's, private.
	dir := filepath.Join(base, "pg")
	c := startCluster(t, Options{Dir: dir})
	require(c.Stop())
	owner, err := serverOSUser(context.Background(), slog.Default())
	require(err)

	self, err := os.ReadFile(os.Args[0])
	require(err)
	bin := filepath.Join(base, "pgcluster.test")
	require(os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(runuser, "-u", "nobody", "--", bin, "-test.run", "^TestStartChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), startChildDir+"="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a fresh start as nobody on root's cluster folder succeeded:\n%s", out)
	}
	for _, want := range []string{"belongs to OS user " + owner.Username, "sudo rm -rf " + dir} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error does not say %q:\n%s", want, out)
		}
	}
}

// As root with the cluster's folder out of the postgres user's reach (a
// checkout under /root, which is 0700), the cluster lives in a temporary
// folder instead. A run killed outright (make run's SIGKILL) leaves that
// server running; the next start on the same folder must stop it and
// remove its folder, as it does a leftover in the folder itself, or every
// killed run leaves a Postgres running for good.
func TestLeftoverOfFallbackIsStopped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another OS user")
	}
	requested := filepath.Join(t.TempDir(), "pg") // its parent is 0700 root
	first := startCluster(t, Options{Dir: requested, Fresh: true})
	if !first.temp {
		t.Fatalf("the first cluster is in %s, not a temporary folder", first.dir)
	}
	firstPID, err := first.PostmasterPID()
	if err != nil {
		t.Fatal(err)
	}
	// The first run is killed: no Stop. The next starts on the same folder.
	second := startCluster(t, Options{Dir: requested, Fresh: true})
	if second.dir == first.dir {
		t.Fatalf("the second cluster reuses %s", first.dir)
	}
	if harness.Running(firstPID) {
		t.Errorf("the killed run's postmaster (pid %d, in %s) still runs after the next start", firstPID, first.dir)
	}
	if _, err := os.Stat(first.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed run's temporary folder %s is still there after the next start (%v)", first.dir, err)
	}
}
