package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/domain/event"
	"hearth/internal/pgtest"
)

// gate holds the orders projection back until the test opens it.
type gate chan struct{}

func (g gate) wait(ctx context.Context) error {
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slowOrders makes the orders projection wait for g before each event or
// batch.
func slowOrders(g gate) func(*Config, []projector.Projection) {
	return func(_ *Config, ps []projector.Projection) {
		for i := range ps {
			if ps[i].Topic != pubsub.TopicOrders {
				continue
			}
			apply, batch := ps[i].Apply, ps[i].ApplyBatch
			ps[i].Apply = func(ctx context.Context, r event.Recorded) error {
				if err := g.wait(ctx); err != nil {
					return err
				}
				return apply(ctx, r)
			}
			ps[i].ApplyBatch = func(ctx context.Context, recs []event.Recorded, also func(context.Context, bun.Tx) error) error {
				if err := g.wait(ctx); err != nil {
					return err
				}
				return batch(ctx, recs, also)
			}
		}
	}
}

// Read your writes with a slowed projection: a GET naming a write's position waits for the read
// models; when they do not get there in time it answers with what they have
// and says so.
func TestReadYourWritesSlowProjection(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := make(gate)
			a := setupWith(t, newDB(t), slowOrders(g))
			customer := a.createCustomer(a.opA, "Ada")
			created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
				map[string]any{"customer_id": customer, "amount_cents": 100})
			id, pos := created.Body["id"].(string), created.Header.Get("Consistency-Position")
			require.NotEmpty(t, pos)
			require.Equal(t, pos, positionOf(created.Body), "the header and the body name one position")

			// The projection is held back: the wait times out and says so, and
			// the answer is what the read model has (nothing yet).
			h := auth(a.opA)
			h.Set("Consistency-Position", pos)
			h.Set("Consistency-Timeout", "50ms")
			r, err := a.send(http.MethodGet, "/v1/orders/"+id, h, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, r.Status, r.String())
			require.Equal(t, "timeout", r.Header.Get("Consistency-Status"))

			// A list with min_position, while the projection is released: it
			// waits (up to the 2 s default) and then sees the order.
			done := make(chan response, 1)
			go func() {
				r, err := a.send(http.MethodGet, "/v1/orders?min_position="+pos, auth(a.opA), nil)
				if err != nil {
					r.Raw = err.Error()
				}
				done <- r
			}()
			close(g)
			r = <-done
			require.Equal(t, http.StatusOK, r.Status, r.String())
			require.Equal(t, "reached", r.Header.Get("Consistency-Status"))
			items := r.Body["items"].([]any)
			require.Len(t, items, 1)
			require.Equal(t, id, items[0].(map[string]any)["id"])

			// A write that touches the order again: its position is reached
			// only at the new version.
			changed := a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
			h = auth(a.opA)
			h.Set("Consistency-Position", changed.Header.Get("Consistency-Position"))
			r, err = a.send(http.MethodGet, "/v1/orders/"+id, h, nil)
			require.NoError(t, err)
			require.Equal(t, "reached", r.Header.Get("Consistency-Status"))
			require.Equal(t, 2, intOf(r.Body["version"]))

			// A malformed position is refused, and so are two positions
			// (the header and the parameter, or the parameter twice),
			// whatever the other says.
			r = a.must(http.StatusBadRequest, http.MethodGet, "/v1/orders?min_position=abc", a.opA, nil)
			require.Contains(t, r.Raw, "min_position")
			posNow := changed.Header.Get("Consistency-Position")
			r = a.must(http.StatusBadRequest, http.MethodGet, "/v1/orders?min_position="+posNow+"&min_position="+posNow, a.opA, nil)
			require.Equal(t, []string{"min_position"}, problemFields(r))
			h = auth(a.opA)
			h.Set("Consistency-Position", posNow)
			r, err = a.send(http.MethodGet, "/v1/orders?min_position=abc", h, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r)
			require.Equal(t, []string{"min_position"}, problemFields(r))
		})
	}
}
