package readmodel

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/app/query"
	"hearth/internal/aggregates"
)

// CustomerRows reads what the read models hold about one customer
// (ops.ExportReadModel).
type CustomerRows struct {
	db *bun.DB
}

// NewCustomerRows returns the reader on the read-model database (the
// request pool).
func NewCustomerRows(db *bun.DB) (*CustomerRows, error) {
	if db == nil {
		return nil, errors.New("readmodel.NewCustomerRows: nil db")
	}
	return &CustomerRows{db: db}, nil
}

// CustomerRows implements ops.ExportReadModel: the customer's service
// requests, orders and service plans, the orders' schedules and the change log of all of
// them, in one REPEATABLE READ snapshot, so that the rows and their change
// log agree, taken after it has locked the tables a rebuild swaps
// (lockAgainstSwaps), so that none of them reads empty. Each list reads at most limit+1 rows, to tell a list past the
// cap (ops.TooLarge) without reading it whole.
func (c *CustomerRows) CustomerRows(ctx context.Context, merchantID, customerID string, limit int) (ops.ExportRows, error) {
	var out ops.ExportRows
	err := c.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		if err := lockAgainstSwaps(ctx, tx); err != nil {
			return err
		}
		var requests []serviceRequestRow
		if err := tx.NewSelect().Model(&requests).Where("merchant_id = ? AND customer_id = ?", merchantID, customerID).
			OrderExpr("created_at, id").Limit(int64(limit + 1)).Scan(ctx); err != nil {
			return fmt.Errorf("select the customer's service requests: %w", err)
		}
		var orders []orderRow
		if err := tx.NewSelect().Model(&orders).Where("merchant_id = ? AND customer_id = ?", merchantID, customerID).
			OrderExpr("created_at, id").Limit(int64(limit + 1)).Scan(ctx); err != nil {
			return fmt.Errorf("select the customer's orders: %w", err)
		}
		var plans []planRow
		if err := tx.NewSelect().Model(&plans).Where("merchant_id = ? AND customer_id = ?", merchantID, customerID).
			OrderExpr("created_at, id").Limit(int64(limit + 1)).Scan(ctx); err != nil {
			return fmt.Errorf("select the customer's service plans: %w", err)
		}
		if len(requests) > limit {
			return ops.TooLarge("service requests", limit)
		}
		if len(orders) > limit {
			return ops.TooLarge("orders", limit)
		}
		if len(plans) > limit {
			return ops.TooLarge("service plans", limit)
		}
		orderIDs := make([]string, len(orders))
		for i, o := range orders {
			orderIDs[i] = o.ID
		}
		var schedules []scheduleRow
		if len(orderIDs) > 0 {
			if err := tx.NewSelect().Model(&schedules).Where("merchant_id = ? AND order_id IN (?)", merchantID, bun.In(orderIDs)).
				OrderExpr("created_at, id").Limit(int64(limit + 1)).Scan(ctx); err != nil {
				return fmt.Errorf("select the customer's schedules: %w", err)
			}
			if len(schedules) > limit {
				return ops.TooLarge("schedules", limit)
			}
		}
		ids := map[string][]string{aggregates.Order.Type: orderIDs}
		for _, r := range requests {
			ids[aggregates.ServiceRequest.Type] = append(ids[aggregates.ServiceRequest.Type], r.ID)
		}
		for _, p := range plans {
			ids[aggregates.Plan.Type] = append(ids[aggregates.Plan.Type], p.ID)
		}
		for _, s := range schedules {
			ids[aggregates.Schedule.Type] = append(ids[aggregates.Schedule.Type], s.ID)
		}
		changes, err := changesOf(ctx, tx, merchantID, ids, limit)
		if err != nil {
			return err
		}
		out = ops.ExportRows{ServiceRequests: make([]query.ServiceRequest, len(requests)), Orders: make([]query.Order, len(orders)),
			Plans: make([]query.Plan, len(plans)), Schedules: make([]query.Schedule, len(schedules)), ChangeLog: changes}
		for i, r := range requests {
			out.ServiceRequests[i] = r.view()
		}
		for i, r := range orders {
			out.Orders[i] = r.view()
		}
		for i, r := range plans {
			out.Plans[i] = r.view()
		}
		for i, r := range schedules {
			out.Schedules[i] = r.view()
		}
		return nil
	})
	return out, err
}

// lockAgainstSwaps is the first statement of a transaction that reads the
// projections' tables under one snapshot (REPEATABLE READ). A rebuild's
// swap renames a new table into a table's place (Rebuild), and renaming is
// not MVCC-safe: read under a snapshot taken before the swap committed,
// the new table's rows (all written after) are invisible and it reads
// empty. LOCK TABLE takes no snapshot, so the snapshot is taken after it:
// a swap under way is waited for (its rename holds ACCESS EXCLUSIVE until
// it commits; the lock then names the new table), and a swap that comes
// later waits for this transaction to end.
func lockAgainstSwaps(ctx context.Context, tx bun.Tx) error {
	var tables []bun.Ident
	for _, f := range aggregates.All() {
		tables = append(tables, bun.Ident(f.Table))
	}
	if _, err := tx.ExecContext(ctx, `LOCK TABLE ? IN ACCESS SHARE MODE`, bun.In(tables)); err != nil {
		return fmt.Errorf("lock the read models against a rebuild's swap: %w", err)
	}
	return nil
}

// changesOf reads the change log of the aggregates ids holds by type, by
// aggregate then version, through the index of (aggregate_type,
// aggregate_id, version).
func changesOf(ctx context.Context, tx bun.Tx, merchantID string, ids map[string][]string, limit int) ([]query.Change, error) {
	var rows []changeRow
	sel := tx.NewSelect().Model(&rows).Where("merchant_id = ?", merchantID)
	some := false
	sel = sel.WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
		for _, f := range aggregates.All() {
			if len(ids[f.Type]) > 0 {
				q = q.WhereOr("aggregate_type = ? AND aggregate_id IN (?)", f.Type, bun.In(ids[f.Type]))
				some = true
			}
		}
		return q
	})
	out := []query.Change{}
	if !some {
		return out, nil
	}
	if err := sel.OrderExpr("aggregate_type, aggregate_id, version").Limit(int64(limit + 1)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("select the customer's change log: %w", err)
	}
	if len(rows) > limit {
		return nil, ops.TooLarge("change-log entries", limit)
	}
	for _, r := range rows {
		out = append(out, r.change())
	}
	return out, nil
}
