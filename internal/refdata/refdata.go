// Package refdata stores the plain (not event-sourced) tables of the write
// side: merchants, API keys, customers, staff and catalog items. They live in
// the event-store database, so that commands can check references inside
// their own transaction.
package refdata

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/command"
	"hearth/app/ops"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/reference"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/idempotency"
	"hearth/internal/keyset"
)

// Store holds the keys and the admin audit log, and implements
// query.Names.
type Store struct {
	db *bun.DB

	usesMu sync.Mutex
	uses   map[string]time.Time // key id -> last use not yet flushed

	hours parsedHours // the calendars' working hours, as parsed

	// Decoders open the sealed fields of the events a customer's export
	// reads (the vault), those sealed for that customer only. Nil: none
	// are opened.
	Decoders aggregates.Decoders
}

// New returns a store on the event-store database.
func New(db *bun.DB) (*Store, error) {
	if db == nil {
		return nil, errors.New("refdata.New: nil db")
	}
	return &Store{db: db, uses: map[string]time.Time{}}, nil
}

// Table stores one kind of reference record. The app's record types map
// onto their tables by Bun's default naming (field BasePriceCents is column
// base_price_cents), so they need no tags of ours.
type Table[T any, P reference.Record[T]] struct {
	db   *bun.DB
	expr string // e.g. "staff AS staff_member"
	// lockFirst, when set, is run (with the merchant's and the record's
	// ids) before an update reads the record: the staff's, which takes the
	// locks of their worker keys (StaffKeysLockSQL).
	lockFirst string
	// afterUpdate, when set, is run (with the merchant's and the record's
	// ids) right after an update writes the record, in its transaction:
	// the staff's, which ends the console sessions of their worker keys
	// once they are inactive (staffSessionsEndSQL).
	afterUpdate string
}

// Tables of the three kinds of record.
func Customers(db *bun.DB) Table[reference.Customer, *reference.Customer] {
	return Table[reference.Customer, *reference.Customer]{db: db, expr: "customers AS customer"}
}

func Staff(db *bun.DB) Table[reference.StaffMember, *reference.StaffMember] {
	return Table[reference.StaffMember, *reference.StaffMember]{db: db, expr: "staff AS staff_member", lockFirst: StaffKeysLockSQL,
		afterUpdate: staffSessionsEndSQL}
}

func CatalogItems(db *bun.DB) Table[reference.CatalogItem, *reference.CatalogItem] {
	return Table[reference.CatalogItem, *reference.CatalogItem]{db: db, expr: "catalog_items AS catalog_item"}
}

// Insert stores a new record: one statement, or a transaction when the
// request's key is checked first or its answer is stored with it (inTx).
func (t Table[T, P]) Insert(ctx context.Context, v *T) error {
	if needsTx(ctx) {
		return inTx(ctx, t.db, func(ctx context.Context, tx bun.Tx) error {
			if err := t.insert(ctx, tx, v); err != nil {
				return err
			}
			if i := command.IdempotentOf(ctx); i != nil {
				return idempotency.Seal(ctx, tx.Tx, i, v)
			}
			return nil
		})
	}
	return t.insert(ctx, t.db, v)
}

func (t Table[T, P]) insert(ctx context.Context, db bun.IDB, v *T) error {
	if _, err := db.NewInsert().Model(v).ModelTableExpr(t.expr).Exec(ctx); err != nil {
		return fmt.Errorf("insert into %s: %w", t.expr, err)
	}
	return nil
}

func (t Table[T, P]) get(ctx context.Context, db bun.IDB, merchantID, id string, lock bool) (T, error) {
	var v T
	q := db.NewSelect().Model(&v).ModelTableExpr(t.expr).Where("merchant_id = ? AND id = ?", merchantID, id)
	if lock {
		q = q.For("UPDATE")
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return v, apperr.ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("select from %s: %w", t.expr, err)
	}
	return v, nil
}

// Get returns one record of the merchant.
func (t Table[T, P]) Get(ctx context.Context, merchantID, id string) (T, error) {
	return t.get(ctx, t.db, merchantID, id, false)
}

// Update changes one record of the merchant, with the audit entry fn
// returns, in one transaction.
func (t Table[T, P]) Update(ctx context.Context, merchantID, id string, fn func(v *T) (*command.Audit, error)) (T, error) {
	var out T
	err := inTx(ctx, t.db, func(ctx context.Context, tx bun.Tx) error {
		if t.lockFirst != "" && uuid.Valid(id) {
			if _, err := tx.Tx.ExecContext(ctx, t.lockFirst, merchantID, id); err != nil {
				return fmt.Errorf("lock before updating %s: %w", t.expr, err)
			}
		}
		v, err := t.get(ctx, tx, merchantID, id, true)
		if err != nil {
			return err
		}
		if P(&v).Erased() { // its personal data is gone for good: nothing new is written back
			return &apperr.ConflictError{Detail: fmt.Sprintf("%s was erased and cannot be changed", id)}
		}
		a, err := fn(&v)
		if err != nil {
			return err
		}
		if _, err := tx.NewUpdate().Model(&v).ModelTableExpr(t.expr).
			Where("merchant_id = ? AND id = ?", merchantID, id).Exec(ctx); err != nil {
			return fmt.Errorf("update %s: %w", t.expr, err)
		}
		if t.afterUpdate != "" {
			if _, err := tx.Tx.ExecContext(ctx, t.afterUpdate, merchantID, id); err != nil {
				return fmt.Errorf("after updating %s: %w", t.expr, err)
			}
		}
		if a != nil {
			if err := WriteAudit(ctx, tx, ops.AuditEntry{Actor: a.Actor, Action: a.Action, Target: a.Target, Details: a.Details}); err != nil {
				return err
			}
		}
		out = v
		if i := command.IdempotentOf(ctx); i != nil {
			return idempotency.Seal(ctx, tx.Tx, i, &v)
		}
		return nil
	})
	return out, err
}

// List returns a page of the merchant's records, newest first; q matches
// the name, case-insensitively, whichever Unicode form (NFC or NFD) the
// name and q were sent in.
func (t Table[T, P]) List(ctx context.Context, merchantID, q string, p query.Page) (query.List[T], error) {
	l, err := keyset.Query[T]{
		DB: t.db,
		New: func(model any) *bun.SelectQuery {
			sel := t.db.NewSelect().Model(model).ModelTableExpr(t.expr).Where("merchant_id = ?", merchantID)
			if q != "" {
				// Names are stored as sent, and an accented letter has two
				// forms that look the same (é, or e and a combining accent):
				// the pattern is tried in both. normalize is immutable, so
				// Postgres folds it, and for a q without such letters the two
				// arms are one and the same condition, which it keeps once.
				pattern := "%" + escapeLike(q) + "%"
				sel = sel.Where("(name ILIKE normalize(?, NFC) ESCAPE '\\' OR name ILIKE normalize(?, NFD) ESCAPE '\\')", pattern, pattern)
			}
			return sel
		},
		Order: keyset.Order{Col: "created_at", Desc: true},
		Key: func(v T) (time.Time, string) {
			k := P(&v).Key()
			return *k.CreatedAt, *k.ID
		},
	}.Run(ctx, p)
	if err != nil {
		return l, fmt.Errorf("list %s: %w", t.expr, err)
	}
	return l, nil
}

var nameTables = map[query.NameKind]string{
	query.Customers:    "customers",
	query.Staff:        "staff",
	query.CatalogItems: "catalog_items",
}

// Names resolves names of one merchant's records; other merchants' ids
// resolve to nothing.
func (s *Store) Names(ctx context.Context, merchantID string, kind query.NameKind, ids []string) (map[string]string, error) {
	table, ok := nameTables[kind]
	if !ok {
		return nil, fmt.Errorf("names: unknown kind %q", kind)
	}
	// $n parameters: a fixed text per table, prepared once per connection
	// (every written and every read view asks for names).
	rows, err := s.db.DB.QueryContext(ctx, "SELECT id, name FROM "+table+" WHERE merchant_id = $1 AND id = ANY($2::text[]::uuid[])", merchantID, ids)
	if err != nil {
		return nil, fmt.Errorf("names of %s: %w", table, err)
	}
	defer rows.Close()
	out := make(map[string]string, len(ids))
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, err
		}
		out[id] = name
	}
	return out, rows.Err()
}

func escapeLike(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r == '%' || r == '_' || r == '\\' {
			out = append(out, '\\')
		}
		out = append(out, r)
	}
	return string(out)
}
