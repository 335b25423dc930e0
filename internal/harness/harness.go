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
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Available reports whether this process can install packages: it runs as
// root on a machine with apt-get.
func Available() bool {
	_, err := exec.LookPath("apt-get")
	return err == nil && os.Geteuid() == 0
}

// Install runs apt-get update, then apt-get install -y packages, streaming
// apt-get's output to os.Stderr.
func Install(ctx context.Context, packages ...string) error {
	aptGet, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return errors.New("harness: cannot install packages here (not root, or no apt-get)")
	}
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

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago; a
// server started on it may still find it taken, and should retry once.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
