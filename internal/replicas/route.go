package replicas

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"
)

// Waiter waits until the read models on one server reflect a write
// (readmodel.Positions on that server's pool); see httpport.Consistency.
type Waiter interface {
	Wait(ctx context.Context, merchantID string, position int64) (bool, error)
}

// Router sends each GET's reads to a usable replica of each Set, or to
// the primary when none is. It is the HTTP port's ReadRouter and, with
// replicas, its Consistency.
//
// Read your writes through a replica: a GET that names a position waits
// until the replica it was given shows that write (the write's aggregates
// at their versions in the replica's read models, and, where the replica
// also holds the event store, the events of its streams without a read
// model, such as customer.erased; the write is found on the primary,
// once). A physical replica replays the primary's WAL in
// order, so by then it also shows everything committed before. If the
// replica does not show it within the wait (CONSISTENCY_TIMEOUT), the GET
// is answered by the primary instead, whose read models the projections
// write first: the client never reads older than its own write.
type Router struct {
	// es and rm are the replicas of the event store (reference data) and of
	// the read models: the same Set when one database holds both; nil
	// without replicas of that database.
	es, rm  *Set
	primary Waiter
	on      map[*Replica]Waiter
	m       *Metrics
}

// primaryCheck bounds the check on the primary after a replica did not show
// a write within the wait.
const primaryCheck = time.Second

// NewRouter routes over es and rm (either may be nil, or both the same
// Set). primary waits on the primary's read models; waiter builds the same
// check on a replica's pool of the read models.
func NewRouter(es, rm *Set, m *Metrics, primary Waiter, waiter func(rm *bun.DB) (Waiter, error)) (*Router, error) {
	if m == nil || primary == nil || waiter == nil {
		return nil, errors.New("replicas.NewRouter: nil dependency")
	}
	r := &Router{es: es, rm: rm, primary: primary, on: map[*Replica]Waiter{}, m: m}
	if rm != nil {
		for _, rep := range rm.members {
			w, err := waiter(rep.db)
			if err != nil {
				return nil, err
			}
			r.on[rep] = w
		}
	}
	return r, nil
}

// Run runs the Sets' monitors until ctx ends.
func (r *Router) Run(ctx context.Context) {
	var g errgroup.Group
	for _, s := range r.sets() {
		g.Go(func() error { s.Run(ctx); return nil })
	}
	_ = g.Wait()
}

// Close closes the replicas' pools.
func (r *Router) Close() {
	for _, s := range r.sets() {
		s.Close()
	}
}

// Sets are the Router's distinct Sets.
func (r *Router) sets() []*Set {
	var sets []*Set
	for _, s := range []*Set{r.es, r.rm} {
		if s != nil && (len(sets) == 0 || sets[0] != s) {
			sets = append(sets, s)
		}
	}
	return sets
}

// choice is where one GET reads: a replica per Set, picked on first use,
// or the primary for everything once a replica could not answer it.
type choice struct {
	primary bool
	n       int
	picks   [2]struct {
		set *Set
		r   *Replica
	}
}

type choiceKey struct{}

// Route returns ctx with a choice of servers for one GET's reads. Reads
// without one (commands, the answers of writes, the console, the
// operator's tools) go to the primary.
func (r *Router) Route(ctx context.Context) context.Context {
	return context.WithValue(ctx, choiceKey{}, &choice{})
}

func choiceOf(ctx context.Context) *choice {
	c, _ := ctx.Value(choiceKey{}).(*choice)
	return c
}

// replica is the replica of s this GET reads from, nil for the primary.
func (c *choice) replica(s *Set) *Replica {
	if c == nil || c.primary || s == nil {
		return nil
	}
	for i := range c.n {
		if c.picks[i].set == s {
			return c.picks[i].r
		}
	}
	return c.pin(s, s.pick())
}

// pin makes rep (nil: the primary) s's server for this GET.
func (c *choice) pin(s *Set, rep *Replica) *Replica {
	if c.n < len(c.picks) {
		c.picks[c.n].set, c.picks[c.n].r = s, rep
		c.n++
	}
	return rep
}

// Wait waits until the server this GET reads the read models from shows
// the write at position (see Router). Without a choice (Route was not
// called) or without a usable replica, it waits on the primary, as
// without replicas.
func (r *Router) Wait(ctx context.Context, merchantID string, position int64) (bool, error) {
	c := choiceOf(ctx)
	rep := c.replica(r.rm)
	if rep == nil {
		// Waited on the primary's read models: the GET reads the primary
		// for the rest (the reference data too, whose replica may not
		// show the write).
		if c != nil {
			c.primary = true
		}
		return r.primary.Wait(ctx, merchantID, position)
	}
	if r.es != nil && r.es != r.rm {
		// Only the read models' replica is checked for the write: the
		// names come from the primary of the reference data.
		c.pin(r.es, nil)
	}
	reached, err := r.on[rep].Wait(ctx, merchantID, position)
	switch {
	case err == nil && reached:
		r.m.waits.WithLabelValues("replica").Inc()
		return true, nil
	case err != nil && !unreachable(err):
		return false, err // the position is not the merchant's (found on the primary)
	case err != nil:
		r.rm.skip(rep, err)
	}
	c.primary = true
	r.m.waits.WithLabelValues(Primary).Inc()
	if ctx.Err() == nil {
		return r.primary.Wait(ctx, merchantID, position)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), primaryCheck)
	defer cancel()
	return r.primary.Wait(pctx, merchantID, position)
}

// Primary sends the rest of ctx's GET to the primary: one that named a
// position the API did not wait for (over CONSISTENCY_MAX_WAITS) reads
// what the primary has, not what a replica lagging seconds behind has.
func (r *Router) Primary(ctx context.Context) {
	if c := choiceOf(ctx); c != nil {
		c.primary = true
	}
}

// unreachable reports whether err says a server could not answer (its
// connection failed, it is shutting down or starting, or a standby
// cancelled the query in a conflict with recovery): the read is worth
// sending to the primary. A statement timeout is not: the query would be as
// slow there.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		class := pgErr.Code[:2]
		return class == "08" || class == "53" || (class == "57" && pgErr.Code != "57014") || pgErr.Code == "40001"
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	return errors.As(err, &netErr) || errors.As(err, &connectErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, net.ErrClosed)
}
