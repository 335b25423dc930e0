// Package patroni starts a throwaway highly available Postgres for tests:
// one etcd (with its v2 API, which Debian's Patroni speaks) and N Patroni
// nodes, each running its own Postgres, in synchronous mode, all on free
// ports of 127.0.0.1. Its URL names every node (libpq's multi-host form
// with target_session_attrs=read-write), so a client reaches whichever is
// primary. Tests stop, freeze and kill nodes to see Hearth through a
// failover; never for production data.
//
// The programs are Debian's (patroni, etcd-server, and the newest Postgres
// under /usr/lib/postgresql); Start installs the first two with apt-get
// when they are missing and Options.Install allows it (as root). Patroni,
// and so Postgres, runs as the postgres user when this process is root:
// initdb and postgres refuse to run as root.
//
// No process outlives the test process: etcd and Patroni are started with
// a parent-death signal, and a guardian (a shell that waits for this
// process to close its end of a pipe, or to die) kills whatever still
// names the cluster's directory on its command line, which is how the
// postmasters Patroni detached (setsid) are found.
package patroni

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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

// The DCS timings. Patroni requires loop_wait + 2*retry_timeout <= ttl; a
// primary that stops renewing its leader key is replaced about TTL after its
// last renewal.
const (
	// TTL is the leader key's time to live.
	TTL = 10 * time.Second
	// LoopWait is the pause of Patroni's loop.
	LoopWait = time.Second
	// RetryTimeout bounds Patroni's retries of DCS and Postgres operations.
	RetryTimeout = 4 * time.Second
)

// Superuser and Password are the superuser URL names; Replicator is the
// replication user.
const (
	Superuser  = "postgres"
	Password   = "hearth-patroni"
	Replicator = "replicator"
)

// readyTimeout bounds Start's wait for a primary and a synchronous standby
// (initdb, then a base backup, on a loaded machine).
const readyTimeout = 3 * time.Minute

// Options configures Start.
type Options struct {
	// Nodes is the number of Patroni nodes. Defaults to 2.
	Nodes int
	// Dir holds everything (etcd's data, each node's data and log). Empty:
	// a new temporary directory. Stop removes it in both cases.
	Dir string
	// Log receives progress messages; nil means slog.Default().
	Log *slog.Logger
	// Install lets Start install Debian's patroni and etcd-server with
	// apt-get when they are missing (only as root).
	Install bool
	// Etcd is the number of etcd members (a quorum survives the loss of a
	// minority: with 3, KillEtcd of one leaves Patroni working). Defaults
	// to 1.
	Etcd int
}

// Cluster is a running etcd and its Patroni nodes.
type Cluster struct {
	dir               string
	log               *slog.Logger
	osUser            *user.User // runs Patroni; nil: this process's user
	etcdPorts         []int      // client ports, one per member
	etcd              []*process // nil once killed (KillEtcd)
	etcdArgs          [][]string // each member's command line, to start it again
	scope             string
	patroniBin, pgBin string
	nodes             []*node
	guardian          io.Closer // closing it (or dying) makes the guardian kill what is left

	mu      sync.Mutex
	frozen  map[int][]int // node: the pids Freeze stopped
	killed  map[int]bool
	stopped bool
}

type node struct {
	name    string
	dir     string
	pgPort  int
	apiPort int
	proc    *process
}

// process is a program started by harness.StartChild: it dies with this
// process.
type process struct {
	cmd    *exec.Cmd
	exited <-chan struct{}
}

func startProcess(cmd *exec.Cmd) (*process, error) {
	exited, err := harness.StartChild(cmd, nil)
	if err != nil {
		return nil, err
	}
	return &process{cmd: cmd, exited: exited}, nil
}

// Start starts etcd and opts.Nodes Patroni nodes, and returns once a
// primary accepts connections and a synchronous standby streams from it.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	log := cmp.Or(opts.Log, slog.Default())
	n := cmp.Or(opts.Nodes, 2)
	if n < 2 {
		return nil, fmt.Errorf("patroni: Options.Nodes must be at least 2 (synchronous mode needs a standby), got %d", n)
	}
	patroniBin, etcdBin, pgBin, err := locate(ctx, opts.Install)
	if err != nil {
		return nil, err
	}
	c := &Cluster{log: log, frozen: map[int][]int{}, killed: map[int]bool{}}
	if os.Geteuid() == 0 {
		if c.osUser, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("patroni: Postgres refuses to run as root, and there is no postgres user: %w", err)
		}
	}
	if c.dir, err = prepareDir(opts.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(); stopErr != nil {
				log.Warn("patroni: cleanup after failed start", "err", stopErr)
			}
		}
	}()
	if c.guardian, err = startGuardian(c.dir); err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx, etcdBin, cmp.Or(opts.Etcd, 1)); err != nil {
		return nil, err
	}
	scope := "hearth-" + filepath.Base(c.dir)
	c.scope, c.patroniBin, c.pgBin = scope, patroniBin, pgBin
	for i := range n {
		nd := &node{name: "node" + strconv.Itoa(i), dir: filepath.Join(c.dir, "node"+strconv.Itoa(i))}
		if nd.pgPort, err = harness.FreePort(); err != nil {
			return nil, err
		}
		if nd.apiPort, err = harness.FreePort(); err != nil {
			return nil, err
		}
		if err := c.startNode(nd, scope, patroniBin, pgBin); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
		if i == 0 { // the first bootstraps alone, the others copy it
			if err := c.await(ctx, readyTimeout, "a primary", func(m []member) bool { return leaderOf(m) != "" }); err != nil {
				return nil, err
			}
		}
	}
	if err := c.awaitSynchronous(ctx, readyTimeout); err != nil {
		return nil, err
	}
	log.Info("Patroni cluster started", "url", c.URL("postgres"), "dir", c.dir)
	return c, nil
}

// locate finds (or installs) Patroni, etcd and Postgres's bin directory.
func locate(ctx context.Context, install bool) (patroniBin, etcdBin, pgBin string, err error) {
	ensure := func(program, pkg string) (string, error) {
		if install {
			return harness.Ensure(ctx, program, pkg)
		}
		p, err := exec.LookPath(program)
		if err != nil {
			return "", fmt.Errorf("patroni: %s is not installed (apt-get install %s): %w", program, pkg, err)
		}
		return p, nil
	}
	if patroniBin, err = ensure("patroni", "patroni"); err != nil {
		return "", "", "", err
	}
	if etcdBin, err = ensure("etcd", "etcd-server"); err != nil {
		return "", "", "", err
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(pgMajor(a), pgMajor(b)) })
	for _, d := range slices.Backward(dirs) {
		if harness.IsExecutable(filepath.Join(d, "postgres")) && harness.IsExecutable(filepath.Join(d, "initdb")) {
			return patroniBin, etcdBin, d, nil
		}
	}
	return "", "", "", errors.New("patroni: no Postgres server under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

func pgMajor(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// prepareDir creates the cluster's directory, traversable by the postgres
// user (each node's directory is given to it).
func prepareDir(requested string) (string, error) {
	dir := requested
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "hearth-patroni-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("patroni: create directory: %w", err)
	}
	return filepath.Abs(dir)
}

// startGuardian starts the shell that kills every process whose command
// line names dir once this process closes the pipe (Stop) or dies. dir
// goes in its environment, not its own command line.
func startGuardian(dir string) (io.Closer, error) {
	const script = `cat >/dev/null
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = "$$" ] && continue
  if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$HEARTH_PATRONI_DIR"; then kill -9 "$pid" 2>/dev/null; fi
done`
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "HEARTH_PATRONI_DIR="+dir+"/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // no parent-death signal: it must outlive this process
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("patroni: guardian: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("patroni: guardian: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return w, nil
}

func (c *Cluster) startEtcd(ctx context.Context, bin string, members int) error {
	type member struct {
		name, client, peer string
		clientPort         int
	}
	ms := make([]member, members)
	var initial []string
	for i := range ms {
		client, err := harness.FreePort()
		if err != nil {
			return err
		}
		peer, err := harness.FreePort()
		if err != nil {
			return err
		}
		ms[i] = member{name: "etcd" + strconv.Itoa(i), client: "http://127.0.0.1:" + strconv.Itoa(client),
			peer: "http://127.0.0.1:" + strconv.Itoa(peer), clientPort: client}
		initial = append(initial, ms[i].name+"="+ms[i].peer)
	}
	for _, m := range ms {
		args := []string{bin, "--name", m.name, "--data-dir", filepath.Join(c.dir, m.name),
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--enable-v2=true"}
		p, err := c.runEtcd(args)
		if err != nil {
			return err
		}
		c.etcd = append(c.etcd, p)
		c.etcdArgs = append(c.etcdArgs, args)
		c.etcdPorts = append(c.etcdPorts, m.clientPort)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, m := range ms {
		for {
			var health struct{ Health string }
			if err := getJSON(ctx, m.client+"/health", &health); err == nil && health.Health == "true" {
				break
			}
			select {
			case <-c.etcd[i].exited:
				return fmt.Errorf("patroni: %s exited at start (see %s.log)", m.name, filepath.Join(c.dir, m.name))
			case <-ctx.Done():
				return fmt.Errorf("patroni: %s not healthy (see %s.log): %w", m.name, filepath.Join(c.dir, m.name), ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// runEtcd starts one etcd member (args[0] is the program), its output
// appended to its log.
func (c *Cluster) runEtcd(args []string) (*process, error) {
	name := args[2]
	logFile, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("patroni: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p, err := startProcess(cmd)
	if err != nil {
		return nil, fmt.Errorf("patroni: %s: %w", name, err)
	}
	return p, nil
}

// RestartEtcd starts etcd member i again, on its data, after KillEtcd.
func (c *Cluster) RestartEtcd(i int) error {
	p, err := c.runEtcd(c.etcdArgs[i])
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd[i] = p
	c.mu.Unlock()
	return nil
}

// Restart starts node i's Patroni again after Kill, on its data: it
// rejoins as a standby (pg_rewind, when it was the primary), and
// AwaitReady sees it streaming.
func (c *Cluster) Restart(i int) error {
	c.mu.Lock()
	killed := c.killed[i]
	c.mu.Unlock()
	if !killed {
		return fmt.Errorf("patroni: Restart of %s, which was not killed", c.nodes[i].name)
	}
	// A killed postmaster leaves its postmaster.pid; Postgres starts
	// anyway once no process holds it.
	if err := c.startNode(c.nodes[i], c.scope, c.patroniBin, c.pgBin); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.killed, i)
	c.mu.Unlock()
	return nil
}

// Etcd is the number of etcd members started.
func (c *Cluster) Etcd() int { return len(c.etcdPorts) }

// KillEtcd kills etcd member i (SIGKILL), as a lost machine of the DCS.
// With a quorum left, Patroni carries on.
func (c *Cluster) KillEtcd(i int) {
	c.mu.Lock()
	p := c.etcd[i]
	c.etcd[i] = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (c *Cluster) startNode(nd *node, scope, patroniBin, pgBin string) error {
	if err := os.MkdirAll(nd.dir, 0o700); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	conf := nodeConfig(nd, scope, c.etcdPorts, pgBin)
	confFile := filepath.Join(nd.dir, "patroni.json") // JSON is YAML
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	if err := os.WriteFile(confFile, b, 0o600); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(nd.dir, "patroni.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // appended to after Restart
	if err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(patroniBin, confFile)
	cmd.Dir = nd.dir
	cmd.Env = append(os.Environ(), "HOME="+nd.dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if c.osUser != nil {
		uid, err1 := strconv.Atoi(c.osUser.Uid)
		gid, err2 := strconv.Atoi(c.osUser.Gid)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("patroni: user postgres: %w", err)
		}
		for _, p := range []string{nd.dir, confFile, logFile.Name()} {
			if err := os.Chown(p, uid, gid); err != nil {
				return fmt.Errorf("patroni: %w", err)
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if nd.proc, err = startProcess(cmd); err != nil {
		return fmt.Errorf("patroni: %s: %w", nd.name, err)
	}
	return nil
}

// nodeConfig is a node's Patroni configuration.
func nodeConfig(nd *node, scope string, etcdPorts []int, pgBin string) map[string]any {
	pg := "127.0.0.1:" + strconv.Itoa(nd.pgPort)
	api := "127.0.0.1:" + strconv.Itoa(nd.apiPort)
	etcd := make([]string, len(etcdPorts))
	for i, p := range etcdPorts {
		etcd[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return map[string]any{
		"scope":   scope,
		"name":    nd.name,
		"restapi": map[string]any{"listen": api, "connect_address": api},
		"etcd":    map[string]any{"hosts": strings.Join(etcd, ","), "protocol": "http"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     int(TTL / time.Second),
				"loop_wait":               int(LoopWait / time.Second),
				"retry_timeout":           int(RetryTimeout / time.Second),
				"synchronous_mode":        true,
				"maximum_lag_on_failover": 1 << 20,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"parameters": map[string]any{
						"wal_level":       "replica",
						"hot_standby":     "on",
						"wal_log_hints":   "on",
						"max_wal_senders": 10,
						"max_connections": 100,
						"fsync":           "off", // throwaway: a killed process loses nothing the OS holds
					},
				},
			},
			"initdb": []any{map[string]string{"encoding": "UTF8"}, map[string]string{"auth-host": "scram-sha-256"}},
		},
		"postgresql": map[string]any{
			"listen":          pg,
			"connect_address": pg,
			"data_dir":        filepath.Join(nd.dir, "data"),
			"bin_dir":         pgBin,
			"pgpass":          filepath.Join(nd.dir, "pgpass"),
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": Superuser, "password": Password},
				"replication": map[string]string{"username": Replicator, "password": Password},
			},
			"parameters": map[string]any{"unix_socket_directories": nd.dir},
			"pg_hba": []string{
				"local all all trust",
				"host replication " + Replicator + " 127.0.0.1/32 scram-sha-256",
				"host all all 127.0.0.1/32 scram-sha-256",
			},
		},
	}
}

// URL is the multi-host URL of database db: every node, in order, and
// target_session_attrs=read-write, so a client keeps the primary.
func (c *Cluster) URL(db string) string {
	hosts := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(nd.pgPort)
	}
	return fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable&target_session_attrs=read-write",
		Superuser, Password, strings.Join(hosts, ","), db)
}

// NodeURL is the URL of database db on one node only.
func (c *Cluster) NodeURL(i int, db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, Password, c.nodes[i].pgPort, db)
}

// Nodes is the number of nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Dir is the directory that holds the cluster.
func (c *Cluster) Dir() string { return c.dir }

// member is a node as Patroni's GET /cluster lists it.
type member struct {
	Name  string `json:"name"`
	Role  string `json:"role"`  // leader, sync_standby, replica
	State string `json:"state"` // running, streaming, ...
}

// members asks the nodes, in turn, for the cluster as Patroni sees it; a
// frozen or killed node does not answer and the next is asked.
func (c *Cluster) members(ctx context.Context) ([]member, error) {
	var errs []error
	for i, nd := range c.nodes {
		if c.isDown(i) {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var body struct{ Members []member }
		err := getJSON(ctx, nd.api()+"/cluster", &body)
		cancel()
		if err == nil {
			return body.Members, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("patroni: no node answers: %w", errors.Join(errs...))
}

func (nd *node) api() string { return "http://127.0.0.1:" + strconv.Itoa(nd.apiPort) }

func leaderOf(ms []member) string {
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			return m.Name
		}
	}
	return ""
}

func hasSyncStandby(ms []member) bool {
	for _, m := range ms {
		if m.Role == "sync_standby" && (m.State == "streaming" || m.State == "running") {
			return true
		}
	}
	return false
}

// Primary is the index of the node Patroni holds as the running leader.
func (c *Cluster) Primary(ctx context.Context) (int, error) {
	ms, err := c.members(ctx)
	if err != nil {
		return -1, err
	}
	name := leaderOf(ms)
	for i, nd := range c.nodes {
		if nd.name == name {
			return i, nil
		}
	}
	return -1, errors.New("patroni: no running leader")
}

// await polls the cluster's members until ok holds, for at most timeout.
func (c *Cluster) await(ctx context.Context, timeout time.Duration, what string, ok func([]member) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []member
	var lastErr error
	for {
		ms, err := c.members(ctx)
		if err == nil && ok(ms) {
			return nil
		}
		last, lastErr = ms, err
		for i, nd := range c.nodes {
			select {
			case <-nd.proc.exited:
				if !c.isDown(i) {
					return fmt.Errorf("patroni: %s exited (see %s)", nd.name, filepath.Join(nd.dir, "patroni.log"))
				}
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroni: waiting for %s: %w (members %+v, last error %v; logs under %s)", what, ctx.Err(), last, lastErr, c.dir)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AwaitReady waits until the nodes not killed or frozen have a running
// leader and a synchronous standby (after Thaw, the old primary rejoins as
// a standby).
func (c *Cluster) AwaitReady(ctx context.Context) error { return c.awaitSynchronous(ctx, readyTimeout) }

// awaitSynchronous waits for a running leader and a synchronous standby.
func (c *Cluster) awaitSynchronous(ctx context.Context, timeout time.Duration) error {
	return c.await(ctx, timeout, "a primary and a synchronous standby", func(ms []member) bool {
		return leaderOf(ms) != "" && hasSyncStandby(ms)
	})
}

// Switchover asks Patroni to hand the primary role to node to, and waits
// until to runs as the leader with a synchronous standby.
func (c *Cluster) Switchover(ctx context.Context, to int) error {
	from, err := c.Primary(ctx)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]string{"leader": c.nodes[from].name, "candidate": c.nodes[to].name})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.nodes[from].api()+"/switchover", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("patroni: switchover: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("patroni: switchover: %w", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("patroni: switchover to %s: %s: %s", c.nodes[to].name, resp.Status, msg)
	}
	name := c.nodes[to].name
	return c.await(ctx, readyTimeout, name+" as the primary", func(ms []member) bool {
		return leaderOf(ms) == name && hasSyncStandby(ms)
	})
}

// pids lists a node's processes: Patroni and what it started, and the
// postmaster (which Patroni detached) and its children.
func (c *Cluster) pids(i int) []int {
	nd := c.nodes[i]
	var roots []int
	if nd.proc.cmd.Process != nil {
		roots = append(roots, nd.proc.cmd.Process.Pid)
	}
	if b, err := os.ReadFile(filepath.Join(nd.dir, "data", "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		if pid, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && pid > 0 {
			roots = append(roots, pid)
		}
	}
	return harness.Descendants(roots...)
}

// signalAll stops the processes first (so none starts another), then sends
// sig to each.
func signalAll(pids []int, sig syscall.Signal) {
	if sig != syscall.SIGCONT {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// Kill kills node i's Patroni and Postgres (SIGKILL), as a lost machine.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := c.pids(i)
	if frozen := c.frozen[i]; frozen != nil {
		pids = append(pids, frozen...)
		delete(c.frozen, i)
	}
	c.killed[i] = true
	signalAll(pids, syscall.SIGKILL)
	<-c.nodes[i].proc.exited
}

// Freeze stops every process of node i (SIGSTOP), as a paused machine;
// Thaw continues them.
func (c *Cluster) Freeze(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := c.pids(i)
	signalAll(pids, syscall.SIGSTOP)
	c.frozen[i] = append(c.frozen[i], pids...)
}

// Thaw continues the processes Freeze stopped.
func (c *Cluster) Thaw(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	signalAll(c.frozen[i], syscall.SIGCONT)
	delete(c.frozen, i)
}

// isDown reports whether node i was frozen or killed.
func (c *Cluster) isDown(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen[i] != nil || c.killed[i]
}

// Stop kills every process of the cluster and removes its directory. Safe
// to call twice.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	var pids []int
	for i := range c.nodes {
		pids = append(pids, c.pids(i)...)
		pids = append(pids, c.frozen[i]...)
	}
	var etcd []*process
	for _, p := range c.etcd {
		if p != nil {
			pids = append(pids, p.cmd.Process.Pid)
			etcd = append(etcd, p)
		}
	}
	c.mu.Unlock()
	signalAll(pids, syscall.SIGKILL)
	for _, nd := range c.nodes {
		<-nd.proc.exited
	}
	for _, p := range etcd {
		<-p.exited
	}
	if c.guardian != nil {
		_ = c.guardian.Close() // it kills any postmaster child left
	}
	if c.dir == "" {
		return nil
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("patroni: remove %s: %w", c.dir, err)
	}
	return nil
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
