// Package harness is what the development and test harnesses that start
// local servers (internal/pgcluster, internal/natsserver) share: installing
// a Debian package when a server's program is missing (only as root, and
// only where apt-get exists), and finding a free port.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
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
