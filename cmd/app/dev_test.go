package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/harness"
	"hearth/internal/pgtest"
)

// devProcess is `app dev` (make run) running in a folder of its own, as a
// newcomer runs it: no DATABASE_URL, no MASTER_KEY, no RELAY_NATS_URL.
type devProcess struct {
	cmd            *exec.Cmd
	addr           string
	stdout, stderr string // files
	exited         chan struct{}
	status         error
}

func startDev(t *testing.T, bin, dir string) *devProcess {
	t.Helper()
	port, err := harness.FreePort()
	require.NoError(t, err)
	p := &devProcess{addr: "127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{})}
	logs := t.TempDir()
	p.stdout, p.stderr = filepath.Join(logs, "stdout"), filepath.Join(logs, "stderr")
	out, err := os.Create(p.stdout)
	require.NoError(t, err)
	defer out.Close()
	errOut, err := os.Create(p.stderr)
	require.NoError(t, err)
	defer errOut.Close()
	p.cmd = devCommand(bin, dir, p.addr)
	p.cmd.Stdout, p.cmd.Stderr = out, errOut
	require.NoError(t, p.cmd.Start())
	go func() {
		p.status = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// devCommand is `app dev` in dir, with a newcomer's environment.
func devCommand(bin, dir, addr string) *exec.Cmd {
	cmd := exec.Command(bin, "dev", "--http-addr", addr)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "DATABASE_URL", "READMODEL_DATABASE_URL", "MASTER_KEY", "MASTER_KEY_FILE", "RELAY_NATS_URL", "HTTP_ADDR", "MODE":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	return cmd
}

// stop is Ctrl-C; a run that does not stop in time is killed.
func (p *devProcess) stop(t *testing.T) {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Errorf("app dev (pid %d) did not stop within 2 minutes of Ctrl-C: killed", p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// noPostmasterLeft, registered before the runs start and so called after
// they stopped, stops a Postgres they left in dir, so that no server
// outlives the test.
func noPostmasterLeft(t *testing.T, dir string) {
	pidFile := filepath.Join(dir, devDir, "data", "postmaster.pid")
	if b, err := os.ReadFile(pidFile); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && harness.Running(pid) {
			t.Errorf("a postmaster (pid %d) was left running on %s: killed", pid, dir)
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
}

func (p *devProcess) output(file string) string {
	b, _ := os.ReadFile(file)
	return string(b)
}

// banner waits for the banner and returns the operator key it prints, or
// fails if the process exits first.
func (p *devProcess) banner(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.output(p.stdout), "\n") {
			if key, ok := strings.CutPrefix(strings.TrimSpace(line), "operator key: "); ok {
				return key
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("app dev exited (%v) before its banner:\n%s", p.status, p.output(p.stderr))
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("no banner within 3 minutes:\n%s", p.output(p.stderr))
	return ""
}

// createCustomer answers the status of a POST /v1/customers, waiting for
// the listener to be up (the banner comes just before it).
func (p *devProcess) createCustomer(t *testing.T, key string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+"/v1/customers", bytes.NewBufferString(`{"name":"Ada Lovelace"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("POST /v1/customers: %v\n%s", err, p.output(p.stderr))
		}
		time.Sleep(20 * time.Millisecond) // polling a listener that is coming up, not a wait for an event
	}
}

// devFolder is a folder to run `make run` in, it and its parent
// traversable, as a home folder is, so that the throwaway cluster lives
// under its .data/ (as root, Postgres runs as another OS user and falls
// back to a temporary folder it cannot reach).
func devFolder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// A second `make run` in the same folder, while the first runs, must not
// take the first's data folder: it stops with a message naming the run that
// holds it, and the first goes on serving on its own Postgres.
func TestDevRefusesASecondRunOnTheSameDataFolder(t *testing.T) {
	bin := buildBinary(t)
	dir := devFolder(t)

	t.Cleanup(func() { noPostmasterLeft(t, dir) })
	first := startDev(t, bin, dir)
	key := first.banner(t)
	require.Equal(t, http.StatusCreated, first.createCustomer(t, key), "the first run's API before the second run")

	second := startDev(t, bin, dir)
	deadline := time.Now().Add(3 * time.Minute)
	for exited := false; !exited; {
		select {
		case <-second.exited:
			exited = true
		case <-time.After(50 * time.Millisecond):
			if strings.Contains(second.output(second.stdout), "operator key: ") {
				t.Fatalf("the second app dev started beside the first on the same .data/ and printed its banner; "+
					"the first's stderr:\n%s", first.output(first.stderr))
			}
			if time.Now().After(deadline) {
				t.Fatalf("the second app dev in the same folder still runs after 3 minutes:\n%s", second.output(second.stderr))
			}
		}
	}
	var exit *exec.ExitError
	require.ErrorAs(t, second.status, &exit, "the second app dev's exit")
	require.Equal(t, 1, exit.ExitCode(), "the second app dev's exit status:\n%s", second.output(second.stderr))
	msg := second.output(second.stderr)
	require.Contains(t, msg, "another app dev (make run)", "the second app dev's message")
	require.Contains(t, msg, "pid "+strconv.Itoa(first.cmd.Process.Pid), "the second app dev's message names the first")

	require.Equal(t, http.StatusCreated, first.createCustomer(t, key),
		"the first run's API after the second run was refused:\n%s", first.output(first.stderr))
	select {
	case <-first.exited:
		t.Fatalf("the first app dev exited (%v):\n%s", first.status, first.output(first.stderr))
	default:
	}
}

// processesUsing lists the processes whose command line names dir (an
// initdb, a postmaster, a nats-server of a run in it).
func processesUsing(dir string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if line := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(line, dir) {
			found = append(found, e.Name()+": "+line)
		}
	}
	return found
}

// Stopping `make run` while it starts its throwaway cluster (its stop
// button in an editor sends SIGINT or SIGTERM to the process alone, not to
// its children as a terminal's Ctrl-C does) stops it quietly, as a Ctrl-C
// after the start does, and leaves no initdb or Postgres running behind it.
func TestDevStoppedDuringTheClusterStartLeavesNothingRunning(t *testing.T) {
	bin := buildBinary(t)
	dir := devFolder(t)
	t.Cleanup(func() {
		for _, p := range processesUsing(dir) {
			pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	p := startDev(t, bin, dir)
	deadline := time.Now().Add(3 * time.Minute)
	// initdb itself running, not only the runuser that starts it as root.
	initdbRuns := func() bool {
		for _, p := range processesUsing(dir) {
			_, line, _ := strings.Cut(p, ": ")
			if prog, _, _ := strings.Cut(line, " "); filepath.Base(prog) == "initdb" {
				return true
			}
		}
		return false
	}
	for !initdbRuns() {
		if time.Now().After(deadline) {
			t.Fatalf("app dev did not begin its cluster within 3 minutes:\n%s", p.output(p.stderr))
		}
		time.Sleep(10 * time.Millisecond) // polling its log for the step, not a wait for an event
	}
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("app dev still runs 2 minutes after SIGINT:\n%s", p.output(p.stderr))
	}
	left := processesUsing(dir)
	require.Empty(t, left, "processes left running on %s after app dev stopped", dir)
	require.NoError(t, p.status, "app dev's exit after SIGINT during its start:\n%s", p.output(p.stderr))
	require.NotContains(t, p.output(p.stderr), "hearth:", "app dev reported an error for a stop during its start")
}

// `make run` with its HTTP port taken (another server on :8080) stops at
// once, before it starts a cluster or prints keys and a console address
// that would lead to the other server, and says how to pick another port.
func TestDevWithItsPortTakenStopsBeforeStartingAnything(t *testing.T) {
	bin := buildBinary(t)
	dir := devFolder(t)
	t.Cleanup(func() { noPostmasterLeft(t, dir) })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	cmd := devCommand(bin, dir, taken.Addr().String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "app dev's exit with its port taken:\n%s", stderr.String())
	require.Equal(t, 1, exit.ExitCode(), "app dev's exit status:\n%s", stderr.String())
	require.NotContains(t, stdout.String(), "operator key", "app dev printed its banner with its port taken")
	require.NotContains(t, stderr.String(), "initialising PostgreSQL cluster", "app dev started a cluster with its port taken")
	require.Contains(t, stderr.String(), "HTTP_ADDR=", "the message says how to choose another port")
}

// After `sudo make run`, `make run` as oneself in the same folder cannot
// touch what root's run left in .data/ (the cluster is the postgres
// user's, the NATS store and the lock root's); it must say how to clear
// it, not only "permission denied" on whichever file it met first.
func TestDevAfterARunAsRootSaysHowToClearDataFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can leave .data/ to other users")
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		t.Skip("no runuser")
	}
	bin := buildBinary(t)
	require.NoError(t, os.Chmod(filepath.Dir(bin), 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(filepath.Dir(bin)), 0o755))
	dir := devFolder(t)
	require.NoError(t, os.Chmod(dir, 0o777))
	t.Cleanup(func() { noPostmasterLeft(t, dir) })

	asRoot := startDev(t, bin, dir)
	asRoot.banner(t)
	asRoot.stop(t)
	require.NoError(t, asRoot.status, "the run as root:\n%s", asRoot.output(asRoot.stderr))

	port, err := harness.FreePort()
	require.NoError(t, err)
	cmd := devCommand(bin, dir, "127.0.0.1:"+strconv.Itoa(port))
	cmd.Args = append([]string{runuser, "-u", "nobody", "--"}, cmd.Args...)
	cmd.Path = runuser
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "app dev as nobody after root:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "sudo make clean", "the message says how to clear .data/")
}

// `make run` stopped (Ctrl-C) after its cluster started but before Hearth
// served (creating the database, migrating, seeding the demo merchant) is
// a stop asked for, as it is while the cluster starts and once Hearth
// serves: exit 0 with a line saying what it was doing, not "hearth:
// context canceled" and status 1.
func TestDevStoppedBeforeItIsReadyStopsCleanly(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	db := holdMigrationsLock(t, url) // another instance, migrating

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		// Mode api: no throwaway NATS, so no lock of a .data/ folder here.
		done <- run(ctx, []string{"dev", "--http-addr", "127.0.0.1:0", "--mode", "api"}, env(map[string]string{
			"DATABASE_URL": url, "MASTER_KEY": testMasterKey, "LOG_FORMAT": "json"}), io.Discard, &stderr)
	}()
	require.False(t, pgtest.DoneOrWaiting(t, db, done), "app dev waits for the migrations lock")
	stop() // Ctrl-C
	err := <-done
	require.NoError(t, err, "a stop asked for is not a failure: %s", stderr.String())
	require.Equal(t, 0, report(err, env(nil), io.Discard))
	require.Contains(t, stderr.String(), "stopped before Hearth was ready", "%s", stderr.String())
}

// `make run` against a database of your own (DATABASE_URL set), which
// outlives the run, leaves no working key behind: the demo's operator,
// admin and worker keys, printed in a terminal, are revoked when the run
// stops, and expire within a week if it is killed, rather than piling up a
// set of admin keys at each run.
func TestDevKeysInYourOwnDatabaseEndWithTheRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t).EventStore
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--http-addr", "127.0.0.1:0", "--mode", "api"}, env(map[string]string{
			"DATABASE_URL": url, "MASTER_KEY": testMasterKey, "LOG_FORMAT": "json", "ADMIN_ADDR": "127.0.0.1:0"}), io.Discard, &stderr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `"msg":"hearth started"`) },
		time.Minute, 10*time.Millisecond, "app dev never started: %s", &stderr)
	var working int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM api_keys WHERE revoked_at IS NULL
		AND expires_at BETWEEN now() AND now() + interval '7 days'`).Scan(&working))
	require.Equal(t, 3, working, "the demo's keys, each expiring within a week")

	stop() // Ctrl-C
	require.NoError(t, <-done, "%s", &stderr)
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM api_keys WHERE revoked_at IS NULL`).Scan(&working))
	require.Zero(t, working, "no key of the run works once it stopped")
}
