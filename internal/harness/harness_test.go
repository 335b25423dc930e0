package harness

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEnsure(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	installs := 0
	// installs writes program into bin, as apt-get would put it on PATH.
	fakeInstall := func(program string) func(context.Context, ...string) error {
		return func(_ context.Context, packages ...string) error {
			installs++
			require.Equal(t, []string{"nodejs", "npm"}, packages)
			if program == "" {
				return nil
			}
			return os.WriteFile(filepath.Join(bin, program), []byte("#!/bin/sh\n"), 0o755)
		}
	}

	_, err := ensure(ctx, "npm", false, fakeInstall("npm"), "nodejs", "npm")
	require.ErrorContains(t, err, "apt-get install nodejs npm", "says what to install")
	require.Zero(t, installs, "installs nothing it may not")

	_, err = ensure(ctx, "npm", true, fakeInstall(""), "nodejs", "npm")
	require.ErrorContains(t, err, "still not on PATH")
	require.Equal(t, 1, installs)

	path, err := ensure(ctx, "npm", true, fakeInstall("npm"), "nodejs", "npm")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(bin, "npm"), path)
	require.Equal(t, 2, installs)

	path, err = ensure(ctx, "npm", true, fakeInstall("npm"), "nodejs", "npm")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(bin, "npm"), path)
	require.Equal(t, 2, installs, "a program on PATH is not installed again")
}

// Installs are serialised through a lock on a file, which another process
// (another open file) cannot take while it is held.
func TestInstallLock(t *testing.T) {
	installLock = filepath.Join(t.TempDir(), "apt.lock")
	unlock, err := lockInstalls()
	require.NoError(t, err)

	other, err := os.Open(installLock)
	require.NoError(t, err)
	defer other.Close()
	require.ErrorIs(t, syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), syscall.EWOULDBLOCK, "held")
	unlock()
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB), "released")
}

// Descendants finds a process's children and their children.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sh -c 'sleep 600' & wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		for _, pid := range Descendants(cmd.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool { // the grandchild forked
		return len(Descendants(cmd.Process.Pid)) >= 3
	}, 30*time.Second, 10*time.Millisecond)
	d := Descendants(cmd.Process.Pid)
	require.Equal(t, cmd.Process.Pid, d[0])
	require.NotContains(t, d, os.Getpid(), "not its parent")
}

// FreePort's ports lie below the ephemeral range (outgoing connections
// cannot take them), are never handed twice to concurrent callers, and
// skip a port a server holds.
func TestFreePortHandsDistinctPortsBelowTheEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	held, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(held))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A counter of this test's own, whose next port is the held one.
	saved := portCounter
	portCounter = filepath.Join(t.TempDir(), "port")
	t.Cleanup(func() { portCounter = saved })
	require.NoError(t, os.WriteFile(portCounter, []byte(strconv.Itoa(held)), 0o666))
	const n = 64
	ports := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			p, err := FreePort()
			if err != nil {
				t.Error(err)
				return
			}
			ports <- p
		})
	}
	wg.Wait()
	close(ports)
	seen := map[int]bool{}
	for p := range ports {
		if p < lo || p >= hi {
			t.Errorf("port %d outside %d-%d", p, lo, hi-1)
		}
		if p == held || seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// freePortChild is set in the environment of this test binary run again as
// a child: it then only calls FreePort (TestFreePortChild).
const freePortChild = "HEARTH_HARNESS_FREEPORT_CHILD"

func TestFreePortChild(t *testing.T) {
	if os.Getenv(freePortChild) == "" {
		t.Skip("run by TestFreePortAfterAnotherUser as a child")
	}
	if _, err := FreePort(); err != nil {
		t.Fatal(err)
	}
}

// FreePort works for a user after another user used it on the same
// machine: make test run as root (as the README says, to install what it
// misses), then make run as oneself. The counter file root made is not
// writable by others, and FreePort failed on it: "harness: open
// /tmp/hearth-harness-port: permission denied", and make run with it.
func TestFreePortAfterAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can run as another user")
	}
	runuser, err := exec.LookPath("runuser")
	if err != nil {
		t.Skip("no runuser")
	}
	// A /tmp of this test's own (os.TempDir reads TMPDIR), and this test
	// binary where the other user can run it.
	tmp := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(tmp), 0o755))
	require.NoError(t, os.Chmod(tmp, 0o1777))
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(tmp, "harness.test")
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	child := func(asUser ...string) (string, error) {
		args := append(asUser, bin, "-test.run", "^TestFreePortChild$", "-test.count=1", "-test.v")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp, freePortChild+"=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := child()
	require.NoError(t, err, "FreePort as root:\n%s", out)
	out, err = child(runuser, "-u", "nobody", "--")
	require.NoError(t, err, "FreePort as nobody after root:\n%s", out)
}
