// Package refdata stores the plain (not event-sourced) tables of the write
// side: merchants, API keys, customers and staff. They live in the
// event-store database, so that commands can check references inside their
// own transaction's database.
package refdata

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/apperr"
	"hearth/app/customer"
	"hearth/app/query"
)

// Store implements command.CustomerStore, command.Directory and
// query.CustomerReadModel.
type Store struct {
	db *bun.DB
}

// New returns a store on the event-store database.
func New(db *bun.DB) (*Store, error) {
	if db == nil {
		return nil, errors.New("refdata.New: nil db")
	}
	return &Store{db: db}, nil
}

type customerRow struct {
	bun.BaseModel `bun:"table:customers"`
	ID            string    `bun:"id,pk,type:uuid"`
	MerchantID    string    `bun:"merchant_id,type:uuid"`
	Name          string    `bun:"name"`
	Phone         string    `bun:"phone"`
	Email         string    `bun:"email"`
	Address       string    `bun:"address"`
	Notes         string    `bun:"notes"`
	CreatedAt     time.Time `bun:"created_at"`
	UpdatedAt     time.Time `bun:"updated_at"`
}

func (r customerRow) customer() customer.Customer {
	return customer.Customer{ID: r.ID, MerchantID: r.MerchantID, Name: r.Name, Phone: r.Phone, Email: r.Email,
		Address: r.Address, Notes: r.Notes, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
}

// CreateCustomer inserts a customer.
func (s *Store) CreateCustomer(ctx context.Context, c customer.Customer) error {
	row := customerRow{ID: c.ID, MerchantID: c.MerchantID, Name: c.Name, Phone: c.Phone, Email: c.Email,
		Address: c.Address, Notes: c.Notes, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
	if _, err := s.db.NewInsert().Model(&row).Exec(ctx); err != nil {
		return fmt.Errorf("insert customer: %w", err)
	}
	return nil
}

// Customer returns one customer of the merchant.
func (s *Store) Customer(ctx context.Context, merchantID, id string) (customer.Customer, error) {
	var row customerRow
	err := s.db.NewSelect().Model(&row).Where("merchant_id = ? AND id = ?", merchantID, id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return customer.Customer{}, apperr.ErrNotFound
	}
	if err != nil {
		return customer.Customer{}, fmt.Errorf("select customer: %w", err)
	}
	return row.customer(), nil
}

// Customers returns a page of the merchant's customers, newest first.
func (s *Store) Customers(ctx context.Context, merchantID, q string, p query.Page) ([]customer.Customer, int, error) {
	var rows []customerRow
	sel := s.db.NewSelect().Model(&rows).Where("merchant_id = ?", merchantID)
	if q != "" {
		sel = sel.Where("name ILIKE ? ESCAPE '\\'", "%"+escapeLike(q)+"%")
	}
	total, err := sel.OrderExpr("created_at DESC, id DESC").Limit(int64(p.Size)).Offset(int64(p.Offset())).ScanAndCount(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("list customers: %w", err)
	}
	out := make([]customer.Customer, len(rows))
	for i, r := range rows {
		out[i] = r.customer()
	}
	return out, int(total), nil
}

// CustomerExists reports whether the merchant has the customer.
func (s *Store) CustomerExists(ctx context.Context, merchantID, id string) (bool, error) {
	ok, err := s.db.NewSelect().Table("customers").Where("merchant_id = ? AND id = ?", merchantID, id).Exists(ctx)
	if err != nil {
		return false, fmt.Errorf("check customer: %w", err)
	}
	return ok, nil
}

// StaffActive reports whether the merchant has the staff member and whether
// it is active.
func (s *Store) StaffActive(ctx context.Context, merchantID, id string) (exists, active bool, err error) {
	err = s.db.NewSelect().Table("staff").Column("active").
		Where("merchant_id = ? AND id = ?", merchantID, id).Scan(ctx, &active)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("check staff: %w", err)
	}
	return true, active, nil
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
