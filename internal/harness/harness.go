// Package harness is what the development and test harnesses that start
// local servers (internal/pgcluster, internal/natsserver) share: installing
// a Debian package when a server's program is missing (only as root, and
// only where apt-get exists), and finding a free port; and the line that
// says on what machine the figures of make bench and make chaos were taken.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Available reports whether this process can install packages: it runs as
// root on a machine with apt-get.
func Available() bool {
	_, err := exec.LookPath("apt-get")
	return err == nil && os.Geteuid() == 0
}

// Install runs apt-get update, then apt-get install -y packages, streaming
// apt-get's output to os.Stderr. Installs are serialised across processes
// (installLock): go test runs packages' test binaries in parallel, and two
// apt-get runs at once fail on apt's own locks instead of waiting.
func Install(ctx context.Context, packages ...string) error {
	aptGet, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return errors.New("harness: cannot install packages here (not root, or no apt-get)")
	}
	unlock, err := lockInstalls()
	if err != nil {
		return err
	}
	defer unlock()
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y"}, packages...)} {
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout = os.Stderr
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	return nil
}

// Ensure returns the path of program, installing packages with apt-get
// first when program is not on PATH and this process can install
// (Available). A process that waited for another's install finds program
// and installs nothing.
func Ensure(ctx context.Context, program string, packages ...string) (string, error) {
	return ensure(ctx, program, Available(), Install, packages...)
}

func ensure(ctx context.Context, program string, canInstall bool, install func(context.Context, ...string) error, packages ...string) (string, error) {
	if path, err := exec.LookPath(program); err == nil {
		return path, nil
	}
	if !canInstall {
		return "", fmt.Errorf("harness: %s is not installed, and this process cannot install it (as root with apt-get: apt-get install %s)",
			program, strings.Join(packages, " "))
	}
	if err := install(ctx, packages...); err != nil {
		return "", fmt.Errorf("harness: install %s for %s: %w", strings.Join(packages, " "), program, err)
	}
	path, err := exec.LookPath(program)
	if err != nil {
		return "", fmt.Errorf("harness: apt-get installed %s, but %s is still not on PATH: %w", strings.Join(packages, " "), program, err)
	}
	return path, nil
}

// installLock is the file whose lock serialises Install across processes.
var installLock = filepath.Join(os.TempDir(), "hearth-harness-apt.lock")

// lockInstalls takes installLock, waiting for another process's install.
func lockInstalls() (unlock func(), err error) {
	f, err := lockFile(installLock, 0o600)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}

// lockFile opens path (creating it with perm) and takes its exclusive lock,
// waiting for another process that holds it. Closing the file releases it.
func lockFile(path string, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, perm)
	if err != nil {
		return nil, fmt.Errorf("harness: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("harness: lock %s: %w", path, err)
	}
	return f, nil
}

// FreePort returns a TCP port of 127.0.0.1 that is free now and that no
// other caller on this machine was given lately.
//
// A port the kernel picks for a listen on port 0 comes from the ephemeral
// range, the same range it draws the local ports of outgoing connections
// from. Test packages run in parallel and open many connections, so such a
// port, closed again to be handed to a server, was at times taken by a
// connection before the server bound it (an etcd that "exited at start").
// FreePort instead hands out ports just below the ephemeral range, in turn,
// from a counter that a file lock shares across processes, and checks that
// each one binds.
func FreePort() (int, error) {
	lo, hi := portRange()
	unlock, next, err := lockPortCounter()
	if err != nil {
		return 0, err
	}
	defer unlock()
	port := *next
	for range hi - lo {
		if port < lo || port >= hi {
			port = lo
		}
		candidate := port
		port++
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(candidate))
		if err != nil {
			continue // taken by a server of some other process
		}
		_ = l.Close()
		*next = port
		return candidate, nil
	}
	return 0, fmt.Errorf("harness: no free port in %d-%d", lo, hi-1)
}

// portRange is the span FreePort hands ports from: the 10,000 ports below
// the kernel's ephemeral range (net.ipv4.ip_local_port_range).
func portRange() (lo, hi int) {
	hi = 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11024 {
				hi = v
			}
		}
	}
	return hi - 10000, hi
}

// portCounter is the file that holds the next port FreePort tries: one
// per OS user, since a file another user made (root's make test, before
// one's own make run) is not writable under the usual umask, and /tmp's
// sticky bit keeps it from being replaced. Two users' counters may hand out
// the same port; each is checked to bind, as a port some other program
// took is.
var portCounter = filepath.Join(os.TempDir(), "hearth-harness-port-"+strconv.Itoa(os.Getuid()))

// lockPortCounter locks portCounter and reads it; unlock writes the
// counter back and releases the lock.
func lockPortCounter() (unlock func(), next *int, err error) {
	f, err := lockFile(portCounter, 0o600)
	if err != nil {
		return nil, nil, err
	}
	b, _ := io.ReadAll(f)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b))) // empty or garbled: start at the range's bottom
	next = &n
	return func() {
		if _, err := f.WriteAt([]byte(strconv.Itoa(*next)+"\n"), 0); err == nil {
			_ = f.Truncate(int64(len(strconv.Itoa(*next)) + 1))
		}
		_ = f.Close()
	}, next, nil
}

// IsExecutable reports whether path is a regular file with an execute bit.
func IsExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// Machine says what ran where and when, for a results file: what (the run),
// the time in UTC, the cores and their model, the newest Postgres installed,
// the Go version and the host name.
func Machine(what string) string {
	host, _ := os.Hostname()
	cpu := "unknown CPU"
	if out, err := exec.Command("sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'").Output(); err == nil {
		cpu = strings.TrimSpace(string(out))
	}
	pgVersion := "Postgres"
	if out, err := exec.Command("sh", "-c", "ls /usr/lib/postgresql | sort -V | tail -1").Output(); err == nil {
		pgVersion = "Postgres " + strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("%s, %s: %d cores (%s), %s, %s, host %s",
		what, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), cpu, pgVersion, runtime.Version(), host)
}

// StartChild starts cmd as a child that dies with this process: in its own
// process group (a Ctrl-C meant for the tests is not its), with SIGKILL as
// its parent-death signal. The kernel sends that signal when the *thread*
// that started the child ends, not this process (go.dev/issue/27505), and
// the Go runtime ends threads, so the child is started and waited for by a
// goroutine that holds its OS thread until the child exits. exited closes
// then, after onExit (optional) got cmd.Wait's error.
func StartChild(cmd *exec.Cmd, onExit func(error)) (exited <-chan struct{}, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		if onExit != nil {
			onExit(err)
		}
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return done, nil
}
