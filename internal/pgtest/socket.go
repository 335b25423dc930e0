package pgtest

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TCPUserTimeout is Linux's TCP_USER_TIMEOUT socket option, which package
// syscall does not name.
const TCPUserTimeout = 0x12

// Sockopt reads an integer socket option of a connection to Postgres, for
// the tests that check how Hearth dials (keepalives, TCP_USER_TIMEOUT).
func Sockopt(t testing.TB, c net.Conn, level, name int) int {
	t.Helper()
	tcp, ok := c.(*net.TCPConn)
	require.True(t, ok, "a TCP connection, not %T", c)
	raw, err := tcp.SyscallConn()
	require.NoError(t, err)
	var v int
	var optErr error
	require.NoError(t, raw.Control(func(fd uintptr) { v, optErr = syscall.GetsockoptInt(int(fd), level, name) }))
	require.NoError(t, optErr)
	return v
}
