package pubsub

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/plan"
)

// PlanEvents returns the merchant's plan's events in order
// (query.PlanStreams); apperr.ErrNotFound when it has no such plan.
func (s *Store) PlanEvents(ctx context.Context, merchantID, id string) ([]event.Event, error) {
	recs, err := s.Read(ctx, PlanStream, merchantID, id)
	if err != nil {
		return nil, err
	}
	out := make([]event.Event, len(recs))
	for i, r := range recs {
		out[i] = r.Event
	}
	return out, nil
}

// VisitOrders returns, by visit key, the ledger's rows of the merchant's
// plan's visits that are past their first order or withdrawn
// (query.PlanStreams): the few the generator withdrew.
func (s *Store) VisitOrders(ctx context.Context, merchantID, id string) (map[string]query.VisitOrder, error) {
	rows, err := s.db.DB.QueryContext(ctx, `SELECT visit_key, order_id::text, generation, withdrawn FROM plan_visits
		WHERE plan_id = $1 AND merchant_id = $2 AND (generation > 0 OR withdrawn)`, id, merchantID)
	if err != nil {
		return nil, fmt.Errorf("read the orders of plan %s: %w", id, err)
	}
	defer rows.Close()
	out := map[string]query.VisitOrder{}
	for rows.Next() {
		var key string
		var o query.VisitOrder
		if err := rows.Scan(&key, &o.OrderID, &o.Generation, &o.Withdrawn); err != nil {
			return nil, err
		}
		out[key] = o
	}
	return out, rows.Err()
}

// Plans lists the service plans of the event store (command.PlanLister):
// the streams whose first event is a plan's.
type Plans struct {
	db *sql.DB
}

// NewPlans returns the lister on the event-store database.
func NewPlans(db *sql.DB) (*Plans, error) {
	if db == nil {
		return nil, errors.New("pubsub.NewPlans: nil db")
	}
	return &Plans{db: db}, nil
}

// ListPlans lists every plan, oldest first.
func (p *Plans) ListPlans(ctx context.Context) ([]command.PlanRef, error) {
	rows, err := p.db.QueryContext(ctx, `SELECT merchant_id, stream_id FROM events
		WHERE stream_type = $1 AND version = 1 ORDER BY position`, plan.StreamType)
	if err != nil {
		return nil, fmt.Errorf("list plans: %w", err)
	}
	defer rows.Close()
	var out []command.PlanRef
	for rows.Next() {
		var r command.PlanRef
		if err := rows.Scan(&r.MerchantID, &r.PlanID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
