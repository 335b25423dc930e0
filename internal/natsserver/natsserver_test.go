package natsserver_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"hearth/internal/natsserver"
	"hearth/internal/natstest"
)

// A restart keeps the port and the JetStream store: a stream and its
// messages survive it, and a client with reconnects carries on.
func TestRestartKeepsPortAndStore(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.AddStream(&nats.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: nats.FileStorage})
	require.NoError(t, err)
	_, err = js.Publish("t.a", []byte("one"))
	require.NoError(t, err)

	require.NoError(t, s.Restart(context.Background()))

	require.Eventually(t, func() bool {
		_, err := js.Publish("t.a", []byte("two"))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	info, err := js.StreamInfo("T")
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs)
}

// The server outlives the thread that started it. The kernel sends a
// child's parent-death signal when the thread that forked it ends, not
// its process (go.dev/issue/27505), and the Go runtime ends a thread whose
// goroutine exits locked to it: a server started from such a goroutine
// must keep running, here and in a test binary whose threads come and go.
func TestServerOutlivesTheThreadThatStartedIt(t *testing.T) {
	t.Parallel()
	type started struct {
		s      *natsserver.Server
		tid    int
		onMain bool
		err    error
	}
	var st started
	for st.s == nil {
		ch, release := make(chan started, 1), make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			if syscall.Gettid() == syscall.Getpid() {
				// The runtime never ends the main thread (it parks it). Hold
				// it, so that the next try runs on another.
				ch <- started{onMain: true}
				<-release
				runtime.UnlockOSThread()
				return
			}
			s, err := natsserver.Start(context.Background(), natsserver.Options{Install: true})
			ch <- started{s: s, tid: syscall.Gettid(), err: err}
		}()
		if st = <-ch; st.onMain {
			defer close(release)
			continue
		}
		require.NoError(t, st.err)
	}
	t.Cleanup(func() { require.NoError(t, st.s.Stop()) })
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", st.tid))
		return os.IsNotExist(err)
	}, 10*time.Second, 5*time.Millisecond, "the starting thread has ended")

	nc, err := nats.Connect(st.s.URL(), nats.Timeout(2*time.Second), nats.NoReconnect())
	require.NoError(t, err, "the server still runs")
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(2 * time.Second))
	require.NoError(t, err)
	_, err = js.AccountInfo()
	require.NoError(t, err, "and answers JetStream requests")
}
