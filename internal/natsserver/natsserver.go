// Package natsserver starts and stops a throwaway NATS server with JetStream
// from the nats-server binary installed on the machine (Debian's nats-server
// package). It is meant for development (make run) and test harnesses
// (internal/natstest), never for production data.
//
// The server listens on 127.0.0.1 only, on a free port chosen at start,
// without authentication, and keeps its JetStream store under Dir/store.
// Restart stops the process and starts it again on the same port and store,
// as an operator's restart would.
package natsserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"hearth/internal/harness"
)

// ErrNotInstalled is returned by Start when no nats-server binary is found.
var ErrNotInstalled = errors.New(`nats-server not found on PATH or in /usr/sbin: ` +
	`install it, e.g. "apt-get install nats-server" on Debian, or point RELAY_NATS_URL at an existing server`)

// Options configures Start.
type Options struct {
	// Dir holds the JetStream store (Dir/store) and the server's log
	// (Dir/nats.log). Empty: a new temporary directory, removed by Stop.
	Dir string
	// Fresh removes an existing store in Dir first.
	Fresh bool
	// Install lets Start install Debian's nats-server package with apt-get
	// when the binary is missing (only as root).
	Install bool
	// Log receives progress messages; nil means slog.Default().
	Log *slog.Logger
}

// Server is a running nats-server started by Start.
type Server struct {
	bin  string
	dir  string
	temp bool
	port int
	log  *slog.Logger

	mu      sync.Mutex
	halting atomic.Bool // set when this package stops the process, until the next start
	cmd     *exec.Cmd
	exited  <-chan struct{} // closed when cmd has exited
	stopped bool
}

// readyTimeout bounds the wait for a started server to answer JetStream
// requests (it recovers its store first).
const readyTimeout = 30 * time.Second

// Locate returns the path of the nats-server binary, or ErrNotInstalled.
func Locate() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	// Debian installs it in /usr/sbin, which a non-root PATH may lack.
	if p := "/usr/sbin/nats-server"; harness.IsExecutable(p) {
		return p, nil
	}
	return "", ErrNotInstalled
}

// Start starts nats-server with JetStream on a free port of 127.0.0.1 and
// returns once it answers JetStream requests.
func Start(ctx context.Context, opts Options) (*Server, error) {
	log := cmp.Or(opts.Log, slog.Default())
	bin, err := Locate()
	if errors.Is(err, ErrNotInstalled) && opts.Install && harness.Available() {
		log.Info("nats-server not found: installing Debian's nats-server package with apt-get")
		if err := harness.Install(ctx, "nats-server"); err != nil {
			return nil, fmt.Errorf("natsserver: install nats-server: %w", err)
		}
		bin, err = Locate()
	}
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: opts.Dir, log: log}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "hearth-nats-"); err != nil {
			return nil, fmt.Errorf("natsserver: %w", err)
		}
		s.temp = true
	} else if opts.Fresh {
		if err := os.RemoveAll(s.storeDir()); err != nil {
			return nil, fmt.Errorf("natsserver: remove old store: %w", err)
		}
	}
	if err := os.MkdirAll(s.storeDir(), 0o755); err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	// The first start lets nats-server pick its port (-p -1), and the port
	// is read from the ports file that this process writes once it listens:
	// a port picked here and handed over could be taken by another server
	// in between, and the readiness ping would then reach that server.
	err = s.start(ctx)
	if err != nil {
		_ = s.Stop()
		return nil, err
	}
	log.Info("nats-server started", "url", s.URL(), "store", s.storeDir(), "log", s.logFile())
	return s, nil
}

// Pid is the server process's id (0 while it is stopped).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// URL is the client URL of the server.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Dir is the directory that holds the store and the log.
func (s *Server) Dir() string { return s.dir }

func (s *Server) storeDir() string { return filepath.Join(s.dir, "store") }
func (s *Server) logFile() string  { return filepath.Join(s.dir, "nats.log") }

// start runs nats-server on s.port and waits until it answers.
func (s *Server) start(ctx context.Context) error {
	port := "-1" // the first start: nats-server picks a free port
	if s.port != 0 {
		port = strconv.Itoa(s.port) // a restart: the same port
	}
	s.halting.Store(false)
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", s.storeDir(),
		"-l", s.logFile(), "--ports_file_dir", s.dir)
	// harness.StartChild: its own process group, so that a Ctrl-C meant for
	// Hearth does not stop the server before Hearth's relay has stopped; and
	// killed if this process dies without calling Stop.
	// What it writes outside its log (a panic) goes to the end of the log.
	logFile, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("natsserver: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logFile, logFile
	exited, err := harness.StartChild(cmd, func(err error) {
		if !s.halting.Load() {
			s.log.Warn("nats-server exited on its own", "status", err, "log", s.logFile())
		}
	})
	if err != nil {
		return fmt.Errorf("natsserver: %w", err)
	}
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(ctx); err != nil {
		s.halting.Store(true)
		s.signal(syscall.SIGKILL)
		return err
	}
	return nil
}

// waitReady waits until the server answers a JetStream request (its store
// is recovered), or it exits.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("natsserver: nats-server exited at start%s", s.logTail())
		default:
		}
		if last = s.readPort(); last == nil {
			if last = ping(s.URL()); last == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsserver: not ready: %w (last: %v)%s", ctx.Err(), last, s.logTail())
		case <-s.exited:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readPort reads the port the running process listens on from its ports
// file (named after its pid, so no other server's), and sets s.port from it
// on the first start; on a restart it must be the same port.
func (s *Server) readPort() error {
	name := filepath.Join(s.dir, fmt.Sprintf("%s_%d.ports", filepath.Base(s.bin), s.cmd.Process.Pid))
	b, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("ports file: %w", err)
	}
	var ports struct {
		Nats []string `json:"nats"`
	}
	if err := json.Unmarshal(b, &ports); err != nil || len(ports.Nats) == 0 {
		return fmt.Errorf("ports file %s: no client URL in %q", name, b)
	}
	u, err := url.Parse(ports.Nats[0])
	if err != nil {
		return fmt.Errorf("ports file %s: %w", name, err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("ports file %s: port: %w", name, err)
	}
	if s.port != 0 && port != s.port {
		return fmt.Errorf("nats-server listens on port %d, not %d", port, s.port)
	}
	s.port = port
	return nil
}

// ping connects once and asks JetStream for the account's information.
func ping(url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(time.Second))
	if err != nil {
		return err
	}
	_, err = js.AccountInfo()
	return err
}

// Restart stops the server (SIGTERM, waiting for it to exit) and starts it
// again on the same port and store.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Halt(); err != nil {
		return err
	}
	return s.Resume(ctx)
}

// Halt stops the server process (SIGTERM, then SIGKILL after 10 s) without
// removing anything; Resume starts it again. Tests use the two to keep the
// server down for a while.
func (s *Server) Halt() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("natsserver: Halt after Stop")
	}
	s.halt()
	return nil
}

// Resume starts a halted server again, on the same port and store.
func (s *Server) Resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("natsserver: Resume after Stop")
	}
	if err := s.start(ctx); err != nil {
		return err
	}
	s.log.Info("nats-server restarted", "url", s.URL())
	return nil
}

// Stop stops the server and removes the directory if Start created it as a
// temporary one. Safe to call twice.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.halt()
	if s.temp {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("natsserver: remove temporary directory: %w", err)
		}
	}
	return nil
}

// halt signals the process to stop and waits for it to exit.
func (s *Server) halt() {
	if s.cmd == nil {
		return
	}
	s.halting.Store(true)
	s.signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.log.Warn("nats-server did not stop within 10s; killing it")
		s.signal(syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
}

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// logTail is the end of the server's log, for an error message.
func (s *Server) logTail() string {
	data, err := os.ReadFile(s.logFile())
	if err != nil || len(data) == 0 {
		return ""
	}
	text := strings.TrimSpace(string(data))
	if len(text) > 2000 {
		text = "..." + text[len(text)-2000:]
	}
	return "\n--- " + s.logFile() + " ---\n" + text
}
