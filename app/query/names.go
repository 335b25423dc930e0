package query

import (
	"context"
	"maps"
)

// NameKind is a kind of reference record whose name lists show.
type NameKind string

const (
	Customers    NameKind = "customers"
	Staff        NameKind = "staff"
	CatalogItems NameKind = "catalog_items"
)

// Names resolves the names of reference records of one merchant. Ids of
// another merchant resolve to nothing, so a list never shows a name from
// another merchant. (Names are looked up, not joined in SQL, because the
// read models may live in another database than the reference data.)
type Names interface {
	Names(ctx context.Context, merchantID string, kind NameKind, ids []string) (map[string]string, error)
}

// nameField says where a view keeps one id and the name that goes with it.
type nameField[V any] struct {
	kind NameKind
	id   func(*V) *string
	name func(*V) *string
}

// joinNames fills the names of items with one lookup per kind, for the ids
// that known (names read already, by id) does not hold.
func joinNames[V any](ctx context.Context, names Names, merchantID string, known map[string]string, items []V, fields ...nameField[V]) error {
	for _, f := range fields {
		var ids []string
		seen := map[string]bool{}
		for i := range items {
			if id := f.id(&items[i]); id != nil && *id != "" && !seen[*id] {
				seen[*id] = true
				if _, ok := known[*id]; !ok {
					ids = append(ids, *id)
				}
			}
		}
		found := known
		if len(ids) > 0 {
			looked, err := names.Names(ctx, merchantID, f.kind, ids)
			if err != nil {
				return err
			}
			found = maps.Clone(looked)
			if found == nil {
				found = map[string]string{}
			}
			maps.Copy(found, known)
		}
		for i := range items {
			if id := f.id(&items[i]); id != nil {
				*f.name(&items[i]) = found[*id]
			}
		}
	}
	return nil
}
