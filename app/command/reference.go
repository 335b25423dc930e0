package command

import (
	"context"
	"errors"
	"time"

	"hearth/domain/event"
	"hearth/domain/reference"
	"hearth/domain/uuid"
)

// RecordStore stores one kind of reference record.
type RecordStore[T any] interface {
	Insert(ctx context.Context, v *T) error
	// Update loads the merchant's record (apperr.ErrNotFound when it has
	// none), lets fn change it and saves it, in one transaction.
	Update(ctx context.Context, merchantID, id string, fn func(v *T) error) (T, error)
}

// Records creates and updates one kind of reference record (customers,
// staff members, catalog items): validate, stamp, store.
type Records[T any, P reference.Record[T]] struct {
	store RecordStore[T]
}

// NewRecords checks its dependency.
func NewRecords[T any, P reference.Record[T]](store RecordStore[T]) (Records[T, P], error) {
	if store == nil {
		return Records[T, P]{}, errors.New("command.NewRecords: nil store")
	}
	return Records[T, P]{store: store}, nil
}

// Create validates v and stores it under a new id for the merchant.
func (h Records[T, P]) Create(ctx context.Context, merchantID string, v T, now time.Time) (T, error) {
	p := P(&v)
	if err := p.Normalize(); err != nil {
		return v, err
	}
	k := p.Key()
	now = event.Instant(now)
	*k.ID, *k.MerchantID, *k.CreatedAt, *k.UpdatedAt = uuid.New(), merchantID, now, now
	if err := h.store.Insert(ctx, &v); err != nil {
		return v, err
	}
	return v, nil
}

// Update applies patch to the merchant's record and validates the result.
// A patch that changes nothing leaves updated_at alone.
func (h Records[T, P]) Update(ctx context.Context, merchantID, id string, patch func(v *T), now time.Time) (T, error) {
	return h.store.Update(ctx, merchantID, id, func(v *T) error {
		before := *v
		patch(v)
		p := P(v)
		if err := p.Normalize(); err != nil {
			return err
		}
		if !equal(before, *v) {
			*p.Key().UpdatedAt = event.Instant(now)
		}
		return nil
	})
}

func equal[T any](a, b T) bool { return any(a) == any(b) }
