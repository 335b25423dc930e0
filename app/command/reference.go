package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"hearth/domain/apperr"
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
	return h.update(ctx, merchantID, id, nil, patch, now)
}

// UpdateSeen is Update for a client that showed the record before its
// user changed it (the console's edit forms, which send every field):
// seen is the updated_at it showed. A record changed since then is not
// patched (the form would write back the values it showed over the
// change): a *apperr.ConflictError.
func (h Records[T, P]) UpdateSeen(ctx context.Context, merchantID, id string, seen time.Time, patch func(v *T), now time.Time) (T, error) {
	return h.update(ctx, merchantID, id, func(v *T) error {
		if at := *P(v).Key().UpdatedAt; !at.Equal(seen) {
			return &apperr.ConflictError{Detail: fmt.Sprintf("%s was changed at %s, after it was shown at %s: read it again, then change it",
				id, at.UTC().Format(time.RFC3339Nano), seen.UTC().Format(time.RFC3339Nano))}
		}
		return nil
	}, patch, now)
}

func (h Records[T, P]) update(ctx context.Context, merchantID, id string, check func(v *T) error, patch func(v *T), now time.Time) (T, error) {
	return h.store.Update(ctx, merchantID, id, func(v *T) error {
		if check != nil {
			if err := check(v); err != nil {
				return err
			}
		}
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
