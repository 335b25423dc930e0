// Package pgcluster starts and stops a throwaway PostgreSQL cluster from the
// server binaries installed on the machine. It is meant for development
// (make run) and test harnesses, never for production data.
//
// The server listens on 127.0.0.1 only, on a free port chosen at start, with
// trust authentication for the superuser "postgres" and no Unix socket.
// When the process runs as root, initdb and pg_ctl run as an unprivileged OS
// user (postgres, or a system user hearth-pg created on demand) through
// runuser, because PostgreSQL refuses to run as root.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"hearth/internal/harness"
)

const (
	// superuser is the database superuser created by initdb, whatever OS user
	// runs the server.
	superuser = "postgres"
	// fallbackOSUser is created when running as root and no postgres OS user exists.
	fallbackOSUser = "hearth-pg"
	// tailBytes bounds how much command output and log text goes into errors.
	tailBytes = 2000
	// pgCtlTimeout is passed to pg_ctl -t (seconds).
	pgCtlTimeout = "60"
	// cancelWait bounds how long a cancelled command has to stop on
	// SIGTERM before it is killed.
	cancelWait = 10 * time.Second
)

// errNotFound is returned by Start when no server binaries can be found.
var errNotFound = errors.New(`PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or under /usr/lib/postgresql/*/bin: ` +
	`install them, e.g. "apt-get install postgresql" on Debian, or set DATABASE_URL to an existing server`)

// Options configures Start.
type Options struct {
	// Dir is the directory that holds the cluster (data in Dir/data, log in
	// Dir/postgres.log). Empty: a new temporary directory, removed by Stop.
	// When running as root and the server's OS user cannot reach Dir, a
	// temporary directory is used instead and Dir/temporary-cluster names
	// it, so that the next Start stops a server a killed process left there.
	Dir string
	// Fresh removes an existing cluster in Dir before initdb. (When Dir holds
	// an existing initialised cluster and Fresh is false, reuse it: just start it.)
	Fresh bool
	// Install lets Start install Debian's postgresql package with apt-get
	// when the binaries are missing (only as root).
	Install bool
	// Fast turns off fsync, synchronous_commit and full_page_writes: for tests only.
	Fast bool
	// Log receives progress messages; nil means slog.Default().
	Log *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start.
type Cluster struct {
	bin    binaries
	osUser *user.User // runs initdb and pg_ctl via runuser; nil means the current user
	dir    string     // holds data/ and postgres.log
	temp   bool       // dir was created by Start and is removed by Stop
	// fallback, when dir is a temporary one used instead of the folder
	// asked for, is the file in that folder that names dir.
	fallback string
	port     int
	fast     bool
	log      *slog.Logger

	mu      sync.Mutex
	stopped bool
}

// binaries holds absolute paths of the PostgreSQL programs used.
type binaries struct {
	initdb    string
	pgCtl     string
	pgIsReady string // empty when not installed next to pg_ctl
}

// Start initialises (unless Dir already holds a cluster) and starts a
// PostgreSQL server on a free port of 127.0.0.1. It returns once the server
// accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	bin, err := locateBinaries(ctx, opts.Install, log)
	if err != nil {
		return nil, err
	}
	osUser, err := serverOSUser(ctx, log)
	if err != nil {
		return nil, err
	}
	dir, temp, err := prepareDir(ctx, opts.Dir, osUser, log)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, osUser: osUser, dir: dir, temp: temp, fast: opts.Fast, log: log}
	if temp && opts.Dir != "" {
		requested, err := filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
		c.fallback = filepath.Join(requested, fallbackFile)
	}
	if err := c.start(ctx, opts.Fresh); err != nil {
		if stopErr := c.Stop(); stopErr != nil {
			log.Warn("pgcluster: cleanup after failed start", "err", stopErr)
		}
		return nil, err
	}
	return c, nil
}

// URL returns a libpq URL for database db:
// postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, url.PathEscape(db))
}

// Port returns the TCP port the server listens on (on 127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.dir, "data") }

// Stop stops the server (pg_ctl stop -m fast, -w) and removes the directory
// if Start created it as a temporary one. Safe to call twice.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	if err := c.stopServer(context.Background(), "fast"); err != nil {
		return err
	}
	if c.temp {
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("pgcluster: remove temporary directory: %w", err)
		}
	}
	if c.fallback != "" {
		if err := os.Remove(c.fallback); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgcluster: remove %s: %w", c.fallback, err)
		}
	}
	c.stopped = true
	c.log.Info("PostgreSQL stopped", "data", c.DataDir())
	return nil
}

// Restart runs pg_ctl restart -m MODE (smart|fast|immediate) -w, keeping the
// same port and settings.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	switch mode {
	case "smart", "fast", "immediate":
	default:
		return fmt.Errorf("pgcluster: invalid shutdown mode %q: want smart, fast or immediate", mode)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("pgcluster: Restart after Stop")
	}
	// -l matters: without it the restarted postmaster would write its log
	// to pg_ctl's stdout.
	_, err := c.run(ctx, c.bin.pgCtl, "restart", "-D", c.DataDir(), "-l", c.logFile(),
		"-m", mode, "-w", "-t", pgCtlTimeout, "-o", c.serverOptions())
	if err != nil {
		return c.withLog(fmt.Errorf("pgcluster: pg_ctl restart: %w", err))
	}
	c.log.Info("PostgreSQL restarted", "mode", mode, "port", c.port)
	return c.waitReady(ctx)
}

// PostmasterPID returns the pid of the running postmaster (from
// DATA/postmaster.pid), for tests that need to signal it.
func (c *Cluster) PostmasterPID() (int, error) {
	data, err := os.ReadFile(c.pidFile())
	if err != nil {
		return 0, fmt.Errorf("pgcluster: read postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: parse postmaster.pid: %w", err)
	}
	return pid, nil
}

// Freeze stops the postmaster and every process it started (SIGSTOP), as
// a paused machine would be: its kernel still accepts connections, nothing
// answers them. thaw (idempotent) continues them.
func (c *Cluster) Freeze() (thaw func(), err error) {
	pm, err := c.PostmasterPID()
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil { // first: it starts no child after this
		return nil, fmt.Errorf("pgcluster: freeze: %w", err)
	}
	pids := harness.Descendants(pm) // pm first
	for _, pid := range pids[1:] {
		_ = syscall.Kill(pid, syscall.SIGSTOP) // one that just exited needs no stopping
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}, nil
}

func (c *Cluster) logFile() string { return filepath.Join(c.dir, "postgres.log") }
func (c *Cluster) pidFile() string { return filepath.Join(c.DataDir(), "postmaster.pid") }

// start prepares the data directory and starts the server.
func (c *Cluster) start(ctx context.Context, fresh bool) error {
	if err := c.stopFallbackLeftover(ctx); err != nil {
		return err
	}
	if err := c.stopLeftover(ctx); err != nil {
		return err
	}
	if fresh {
		if err := os.RemoveAll(c.DataDir()); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				err = foreignDir(c.dir, err)
			}
			return fmt.Errorf("pgcluster: remove old cluster: %w", err)
		}
	}
	if fileExists(filepath.Join(c.DataDir(), "PG_VERSION")) {
		c.log.Info("reusing existing PostgreSQL cluster", "data", c.DataDir())
	} else if err := c.initdb(ctx); err != nil {
		return err
	}
	return c.startServer(ctx)
}

// stopLeftover stops a server still running on the data directory, e.g. one
// left behind by a process that died without calling Stop.
func (c *Cluster) stopLeftover(ctx context.Context) error {
	if !fileExists(c.pidFile()) {
		return nil
	}
	if _, err := c.run(ctx, c.bin.pgCtl, "status", "-D", c.DataDir()); err != nil {
		return nil // not running: postgres removes a stale postmaster.pid itself
	}
	c.log.Warn("stopping a PostgreSQL server left running on the cluster directory", "data", c.DataDir())
	return c.stopServer(ctx, "fast")
}

// fallbackFile, in the folder asked for, names the temporary folder used
// instead of it.
const fallbackFile = "temporary-cluster"

// stopFallbackLeftover stops the server of a temporary folder that an
// earlier start on the same folder used instead and did not stop (its
// process was killed), removes that folder, and names c's own in its
// place: without it, every killed run would leave a server running in a
// folder nothing knows of.
func (c *Cluster) stopFallbackLeftover(ctx context.Context) error {
	if c.fallback == "" {
		return nil
	}
	b, err := os.ReadFile(c.fallback)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgcluster: read %s: %w", c.fallback, err)
	}
	// Only a folder of this package's, whatever the file says.
	prev := filepath.Clean(strings.TrimSpace(string(b)))
	if ok, _ := filepath.Match(filepath.Join(os.TempDir(), "hearth-pg-*"), prev); ok && prev != c.dir {
		old := &Cluster{bin: c.bin, osUser: c.osUser, dir: prev, log: c.log}
		if err := old.stopLeftover(ctx); err != nil {
			return err
		}
		if err := os.RemoveAll(prev); err != nil {
			return fmt.Errorf("pgcluster: remove leftover temporary directory: %w", err)
		}
	}
	if err := os.WriteFile(c.fallback, []byte(c.dir+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", c.fallback, err)
	}
	return nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	c.log.Info("initialising PostgreSQL cluster", "data", c.DataDir(), "initdb", c.bin.initdb)
	_, err := c.run(ctx, c.bin.initdb, "-D", c.DataDir(), "-U", superuser,
		"--auth=trust", "--encoding=UTF8", "--locale=C")
	if err != nil {
		return fmt.Errorf("pgcluster: initdb: %w", err)
	}
	return nil
}

// startServer starts the server on a free port, retrying once with another
// port if the chosen one was taken in the meantime.
func (c *Cluster) startServer(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		port, err := harness.FreePort()
		if err != nil {
			return err
		}
		c.port = port
		portTaken, err := c.pgCtlStart(ctx)
		if err == nil {
			break
		}
		if !portTaken || attempt == 2 {
			return err
		}
		c.log.Warn("PostgreSQL port was taken; retrying with another port", "port", port)
	}
	c.log.Info("PostgreSQL started", "port", c.port, "data", c.DataDir(), "log", c.logFile())
	return c.waitReady(ctx)
}

// pgCtlStart runs pg_ctl start and reports whether a failure was caused by
// the port being in use.
func (c *Cluster) pgCtlStart(ctx context.Context) (portTaken bool, err error) {
	logStart := fileSize(c.logFile())
	_, err = c.run(ctx, c.bin.pgCtl, "start", "-D", c.DataDir(), "-l", c.logFile(),
		"-w", "-t", pgCtlTimeout, "-o", c.serverOptions())
	if err == nil {
		return false, nil
	}
	newLog := readFrom(c.logFile(), logStart)
	portTaken = strings.Contains(newLog, "could not bind") ||
		strings.Contains(newLog, "could not create any TCP/IP sockets") ||
		strings.Contains(newLog, "already in use")
	return portTaken, c.withLog(fmt.Errorf("pgcluster: pg_ctl start: %w", err))
}

// serverOptions returns the postgres command line passed through pg_ctl -o
// (pg_ctl hands it to /bin/sh, hence the shell quoting).
func (c *Cluster) serverOptions() string {
	opts := []string{
		"-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=''",
		"-c", "max_connections=200",
	}
	if c.fast {
		opts = append(opts,
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off")
	}
	return strings.Join(opts, " ")
}

// waitReady double-checks readiness with pg_isready when it is installed
// (pg_ctl -w has already waited for the server).
func (c *Cluster) waitReady(ctx context.Context) error {
	if c.bin.pgIsReady == "" {
		return nil
	}
	_, err := runAs(ctx, nil, "", c.bin.pgIsReady,
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", superuser, "-d", "postgres", "-t", "30")
	if err != nil {
		return c.withLog(fmt.Errorf("pgcluster: server not ready: %w", err))
	}
	return nil
}

// stopServer runs pg_ctl stop; a server that is not running counts as stopped.
func (c *Cluster) stopServer(ctx context.Context, mode string) error {
	_, err := c.run(ctx, c.bin.pgCtl, "stop", "-D", c.DataDir(), "-m", mode, "-w", "-t", pgCtlTimeout)
	if err != nil && fileExists(c.pidFile()) {
		return c.withLog(fmt.Errorf("pgcluster: pg_ctl stop: %w", err))
	}
	return nil
}

// run runs a PostgreSQL program as the server's OS user, in the cluster directory.
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	return runAs(ctx, c.osUser, c.dir, name, args...)
}

// withLog appends the tail of the server log to err.
func (c *Cluster) withLog(err error) error {
	return fmt.Errorf("%w%s", err, section("log "+c.logFile(), readFrom(c.logFile(), fileSize(c.logFile())-tailBytes)))
}

// locateBinaries finds the server binaries, installing them with apt-get if
// allowed and needed.
func locateBinaries(ctx context.Context, install bool, log *slog.Logger) (binaries, error) {
	if bin, ok := findBinaries(); ok {
		return bin, nil
	}
	if !install || !harness.Available() {
		return binaries{}, errNotFound
	}
	log.Info("PostgreSQL server binaries not found: installing Debian's postgresql package with apt-get")
	if err := harness.Install(ctx, "postgresql"); err != nil {
		return binaries{}, fmt.Errorf("pgcluster: install postgresql: %w", err)
	}
	if bin, ok := findBinaries(); ok {
		return bin, nil
	}
	return binaries{}, fmt.Errorf("pgcluster: apt-get installed postgresql, but still: %w", errNotFound)
}

// findBinaries looks for initdb and pg_ctl on PATH, then under the highest
// version of /usr/lib/postgresql/*/bin.
func findBinaries() (binaries, bool) {
	initdb, err1 := exec.LookPath("initdb")
	pgCtl, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return newBinaries(initdb, pgCtl), true
	}
	for _, dir := range debianBinDirs() {
		initdb, pgCtl := filepath.Join(dir, "initdb"), filepath.Join(dir, "pg_ctl")
		if harness.IsExecutable(initdb) && harness.IsExecutable(pgCtl) {
			return newBinaries(initdb, pgCtl), true
		}
	}
	return binaries{}, false
}

// newBinaries resolves symlinks (PATH entries are often links into
// /usr/lib/postgresql/VER/bin) and looks for pg_isready next to pg_ctl.
func newBinaries(initdb, pgCtl string) binaries {
	bin := binaries{initdb: resolve(initdb), pgCtl: resolve(pgCtl)}
	if p := filepath.Join(filepath.Dir(bin.pgCtl), "pg_isready"); harness.IsExecutable(p) {
		bin.pgIsReady = p
	}
	return bin
}

// debianBinDirs returns /usr/lib/postgresql/*/bin, highest version first.
func debianBinDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	return dirs
}

// compareVersions compares dotted numeric versions such as "9.6" and "15".
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		if d := versionPart(as, i) - versionPart(bs, i); d != 0 {
			return d
		}
	}
	return 0
}

func versionPart(parts []string, i int) int {
	if i >= len(parts) {
		return 0
	}
	n, err := strconv.Atoi(parts[i])
	if err != nil {
		return -1
	}
	return n
}

// serverOSUser returns the OS user that must run initdb and postgres, or nil
// when not running as root.
func serverOSUser(ctx context.Context, log *slog.Logger) (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", fallbackOSUser} {
		if u, err := user.Lookup(name); err == nil {
			return u, nil
		}
	}
	useradd, err := findSbin("useradd")
	if err != nil {
		return nil, err
	}
	log.Info("creating system user to run PostgreSQL (it refuses to run as root)", "user", fallbackOSUser)
	_, err = runAs(ctx, nil, "", useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", fallbackOSUser)
	u, lookupErr := user.Lookup(fallbackOSUser)
	if lookupErr != nil { // a concurrent Start may have created it: only fail if it is still missing
		return nil, fmt.Errorf("pgcluster: create OS user %s: %w", fallbackOSUser, errors.Join(err, lookupErr))
	}
	return u, nil
}

// prepareDir creates the cluster directory and makes it usable by the server's
// OS user, falling back to a temporary directory when it cannot be.
func prepareDir(ctx context.Context, requested string, u *user.User, log *slog.Logger) (dir string, temp bool, err error) {
	if requested == "" {
		dir, err := makeTempDir(ctx, u)
		return dir, true, err
	}
	dir, err = filepath.Abs(requested)
	if err != nil {
		return "", false, fmt.Errorf("pgcluster: %w", err)
	}
	// Parents are created traversable (0755) so that the server's OS user can
	// reach the cluster directory, which itself stays private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", false, fmt.Errorf("pgcluster: create cluster directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", false, fmt.Errorf("pgcluster: create cluster directory: %w", err)
	}
	if u == nil {
		return dir, false, nil
	}
	if err := chownCluster(dir, u); err != nil {
		return "", false, err
	}
	if err := checkAccess(ctx, dir, u); err != nil {
		tmp, tmpErr := makeTempDir(ctx, u)
		if tmpErr != nil {
			return "", false, errors.Join(err, tmpErr)
		}
		log.Warn("cluster directory is unusable by the PostgreSQL OS user: using a temporary directory instead, removed by Stop",
			"dir", dir, "reason", err, "tempdir", tmp)
		return tmp, true, nil
	}
	return dir, false, nil
}

// ForeignDirError is the rule that a cluster directory is started afresh
// only by the OS user it belongs to: a run as root leaves it to the server's
// OS user (postgres), and a later run as oneself cannot remove it.
type ForeignDirError struct {
	Dir   string
	Owner string // the OS user it belongs to, or its uid
	Err   error
}

func (e *ForeignDirError) Error() string {
	return fmt.Sprintf("%v: %s belongs to OS user %s (a run as root leaves it so): remove it as root, sudo rm -rf %s, "+
		"or go on running as root", e.Err, e.Dir, e.Owner, e.Dir)
}

func (e *ForeignDirError) Unwrap() error { return e.Err }

// foreignDir names the owner of dir when it is not this process's user,
// for err, a refused removal in it; otherwise it returns err.
func foreignDir(dir string, err error) error {
	info, statErr := os.Stat(dir)
	if statErr != nil {
		return err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return err
	}
	owner := strconv.FormatUint(uint64(st.Uid), 10)
	if u, lookupErr := user.LookupId(owner); lookupErr == nil {
		owner = u.Username
	}
	return &ForeignDirError{Dir: dir, Owner: owner, Err: err}
}

// makeTempDir creates a temporary cluster directory owned by u.
func makeTempDir(ctx context.Context, u *user.User) (string, error) {
	dir, err := os.MkdirTemp("", "hearth-pg-")
	if err != nil {
		return "", fmt.Errorf("pgcluster: create temporary directory: %w", err)
	}
	if u == nil {
		return dir, nil
	}
	err = chownCluster(dir, u)
	if err == nil {
		err = checkAccess(ctx, dir, u)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// chownCluster gives dir, and any existing data directory and log in it, to u.
// It does not touch anything else in dir.
func chownCluster(dir string, u *user.User) error {
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("pgcluster: user %s: %w", u.Username, err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pgcluster: chown cluster directory: %w", err)
	}
	if err := os.Lchown(filepath.Join(dir, "postgres.log"), uid, gid); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgcluster: chown log: %w", err)
	}
	err := filepath.WalkDir(filepath.Join(dir, "data"), func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgcluster: chown data directory: %w", err)
	}
	return nil
}

// checkAccess checks that u can reach and write dir.
func checkAccess(ctx context.Context, dir string, u *user.User) error {
	if _, err := runAs(ctx, u, "", "test", "-w", dir, "-a", "-x", dir); err == nil {
		return nil
	}
	if blocked := firstBlockedParent(ctx, dir, u); blocked != "" {
		return fmt.Errorf("user %s cannot traverse %s", u.Username, blocked)
	}
	return fmt.Errorf("user %s cannot write to %s", u.Username, dir)
}

// firstBlockedParent returns the first ancestor of dir that u cannot traverse.
func firstBlockedParent(ctx context.Context, dir string, u *user.User) string {
	var parents []string
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		parents = append(parents, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	slices.Reverse(parents)
	for _, p := range parents {
		if _, err := runAs(ctx, u, "", "test", "-x", p); err != nil {
			return p
		}
	}
	return ""
}

// runAs runs a command, as OS user u through runuser when u is not nil, and
// returns its combined output. Output goes to a file, not a pipe, so that a
// daemon started by the command cannot keep Wait from returning.
func runAs(ctx context.Context, u *user.User, dir, name string, args ...string) (string, error) {
	if u != nil {
		runuser, err := findSbin("runuser")
		if err != nil {
			return "", err
		}
		args = append([]string{"-u", u.Username, "--", name}, args...)
		name = runuser
	}
	outFile, err := os.CreateTemp("", "pgcluster-output-")
	if err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	defer os.Remove(outFile.Name())
	defer outFile.Close()

	cmd := exec.CommandContext(ctx, name, args...)
	// A cancelled start (Ctrl-C of make run) stops the command with
	// SIGTERM, not SIGKILL: runuser passes SIGTERM on to the program it
	// runs, where a SIGKILL would kill runuser alone and leave initdb
	// running, and initdb removes what it had made. One that outlives
	// cancelWait is killed.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = cancelWait
	cmd.Dir = dir
	cmd.Stdout = outFile
	cmd.Stderr = outFile
	runErr := cmd.Run()

	out, err := os.ReadFile(outFile.Name())
	if err != nil {
		return "", fmt.Errorf("pgcluster: read command output: %w", err)
	}
	text := strings.TrimSpace(string(out))
	if runErr != nil {
		return text, fmt.Errorf("%s: %w%s", commandLine(name, args), runErr, section("output", text))
	}
	return text, nil
}

// commandLine formats a command for error messages, quoting arguments that
// contain spaces.
func commandLine(name string, args []string) string {
	parts := []string{name}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// findSbin finds a system program that may be missing from a non-root PATH.
func findSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p := filepath.Join(dir, name); harness.IsExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pgcluster: %s not found (needed to run PostgreSQL as an unprivileged user when running as root)", name)
}

// section formats text as a titled block for an error message, keeping its tail.
func section(title, text string) string {
	text = strings.TrimSpace(text)
	if text == "" {
		return ""
	}
	if len(text) > tailBytes {
		text = "..." + text[len(text)-tailBytes:]
	}
	return "\n--- " + title + " ---\n" + text
}

// readFrom returns the content of path from offset on ("" on error).
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(max(offset, 0), io.SeekStart); err != nil {
		return ""
	}
	data, _ := io.ReadAll(f)
	return string(data)
}

func fileSize(path string) int64 {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return info.Size()
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// resolve returns path made absolute with symlinks resolved, or path itself on error.
func resolve(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	if p, err := filepath.Abs(path); err == nil {
		path = p
	}
	return path
}
