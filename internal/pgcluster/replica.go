package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
)

// StartReplica starts a streaming replica (a hot standby) of c: a base
// backup of c taken with pg_basebackup -R (which writes primary_conninfo
// and standby.signal), started on a free port of 127.0.0.1 with c's
// settings. It returns once the standby accepts connections; Stop stops it
// and removes its directory.
func (c *Cluster) StartReplica(ctx context.Context) (*Cluster, error) {
	dir, temp, err := prepareDir(ctx, "", c.osUser, c.log)
	if err != nil {
		return nil, err
	}
	r := &Cluster{bin: c.bin, osUser: c.osUser, dir: dir, temp: temp, fast: c.fast, log: c.log}
	basebackup := filepath.Join(filepath.Dir(c.bin.pgCtl), "pg_basebackup")
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", superuser,
		"-D", r.DataDir(), "-R", "-X", "stream", "--checkpoint=fast"}
	if c.fast {
		args = append(args, "--no-sync") // as fsync=off: seconds saved, for tests
	}
	if _, err := r.run(ctx, basebackup, args...); err != nil {
		return nil, errors.Join(fmt.Errorf("pgcluster: pg_basebackup: %w", err), r.Stop())
	}
	if err := r.startServer(ctx); err != nil {
		return nil, errors.Join(err, r.Stop())
	}
	return r, nil
}

// Halt stops the server (pg_ctl stop -m fast) and keeps its data and port,
// for Resume.
func (c *Cluster) Halt(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopServer(ctx, "fast")
}

// Resume starts a halted server again, on the same port.
func (c *Cluster) Resume(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("pgcluster: Resume after Stop")
	}
	if _, err := c.pgCtlStart(ctx); err != nil {
		return err
	}
	return c.waitReady(ctx)
}
