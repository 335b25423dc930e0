package vault_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/adapters/vault"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/aggregates"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	oldKey = "old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	newKey = "new:HyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4="
)

// fixture is a vault on a fresh event store with one merchant.
type fixture struct {
	db       *sql.DB
	merchant string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore).DB
	f := fixture{db: db, merchant: uuid.New()}
	_, err := db.Exec(`INSERT INTO merchants (id, name) VALUES ($1, 'acme')`, f.merchant)
	require.NoError(t, err)
	return f
}

func (f fixture) vault(t *testing.T, ring string) *vault.Vault {
	t.Helper()
	r, err := keyring.Parse(ring)
	require.NoError(t, err)
	v, err := vault.New(f.db, r)
	require.NoError(t, err)
	return v
}

// adopt gives subject a data key as a writer does (KeySQL), and returns
// whether one was stored (false: erased).
func (f fixture) adopt(t *testing.T, v *vault.Vault, subject string) bool {
	t.Helper()
	sealed, err := v.NewKey(subject)
	require.NoError(t, err)
	var stored []byte
	err = f.db.QueryRow(vault.KeySQL, subject, f.merchant, event.SubjectCustomer, sealed).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return false
	}
	require.NoError(t, err)
	require.NoError(t, v.Adopt(subject, stored))
	return true
}

// sealed is an OrderCreated sealed for subject.
func sealed(t *testing.T, v *vault.Vault, subject, notes string) []byte {
	t.Helper()
	data, err := json.Marshal(order.Created{OrderID: uuid.New(), CustomerID: subject, AmountCents: 1200, Notes: notes, Status: order.StatusPending})
	require.NoError(t, err)
	out, err := v.Seal(subject, "OrderCreated", data, order.Personal["OrderCreated"])
	require.NoError(t, err)
	return out
}

// A sealed event keeps its ids and amounts in clear and its personal fields
// only as ciphertext; the vault's decoder gives them back, on any instance
// with the master key; the plain decoder leaves them empty.
func TestSealedFieldsOpenOnlyThroughTheVault(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	writer := f.vault(t, oldKey)
	subject := uuid.New()
	require.True(t, f.adopt(t, writer, subject))
	data := sealed(t, writer, subject, "key under the mat")
	require.NotContains(t, string(data), "key under the mat")
	require.Contains(t, string(data), `"amount_cents":1200`)
	require.Contains(t, string(data), subject)

	reader := f.vault(t, oldKey) // another instance: reads the key from the table
	e, err := reader.Decoder(aggregates.Order.Facts)("OrderCreated", data)
	require.NoError(t, err)
	require.Equal(t, "key under the mat", e.(order.Created).Notes)
	require.Empty(t, e.(order.Created).ErasedFields)
	e, err = aggregates.Plain.Decoder(aggregates.Order.Facts)("OrderCreated", data)
	require.NoError(t, err)
	require.Empty(t, e.(order.Created).Notes)

	// A box moved to another event type does not open.
	_, err = reader.Decoder(aggregates.Order.Facts)("OrderDetailsUpdated", data)
	require.ErrorContains(t, err, "do not open")
	// A wrong master key cannot unwrap the data key.
	_, err = f.vault(t, newKey).Decoder(aggregates.Order.Facts)("OrderCreated", data)
	require.ErrorIs(t, err, keyring.ErrUnknownKey)
}

// After an erasure (key deleted, subject recorded) the fields read as
// erased, even through a key still cached by Erasing; a missing key of a
// subject that was not erased is an error naming it, never an empty field;
// no key is made again for an erased subject.
func TestErasedAndMissingKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.vault(t, oldKey)
	erased, lost := uuid.New(), uuid.New()
	require.True(t, f.adopt(t, v, erased))
	require.True(t, f.adopt(t, v, lost))
	erasedData, lostData := sealed(t, v, erased, "ALPHA notes"), sealed(t, v, lost, "BRAVO notes")

	// Cached: Erasing reads the subject as erased all the same.
	e, err := v.Erasing(aggregates.Order.Facts, erased)("OrderCreated", erasedData)
	require.NoError(t, err)
	require.Equal(t, []string{"notes"}, e.(order.Created).ErasedFields)
	require.Empty(t, e.(order.Created).Notes)

	_, err = f.db.Exec(`DELETE FROM data_keys WHERE subject_id = $1`, erased)
	require.NoError(t, err)
	_, err = f.db.Exec(`INSERT INTO erased_subjects (subject_id, merchant_id, subject_type, erased_by) VALUES ($1, $2, 'customer', 'test')`, erased, f.merchant)
	require.NoError(t, err)
	_, err = f.db.Exec(`DELETE FROM data_keys WHERE subject_id = $1`, lost)
	require.NoError(t, err)

	fresh := f.vault(t, oldKey)
	e, err = fresh.Decoder(aggregates.Order.Facts)("OrderCreated", erasedData)
	require.NoError(t, err)
	require.Equal(t, []string{"notes"}, e.(order.Created).ErasedFields)
	require.Empty(t, e.(order.Created).Notes)
	_, err = fresh.Decoder(aggregates.Order.Facts)("OrderCreated", lostData)
	var missing *vault.MissingKeyError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, lost, missing.Subject)

	require.False(t, f.adopt(t, fresh, erased), "no new key for an erased subject")
	_, err = fresh.Seal(erased, "OrderCreated", []byte(`{"notes":"x"}`), []string{"notes"})
	var refused *vault.ErasedError
	require.ErrorAs(t, err, &refused)
}

// A read of a key that fails (the database is gone) is temporary: the
// projection retries it rather than park the aggregate.
func TestLookupFailureIsTemporary(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.vault(t, oldKey)
	subject := uuid.New()
	require.True(t, f.adopt(t, v, subject))
	data := sealed(t, v, subject, "x")
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore).DB
	require.NoError(t, db.Close())
	r, err := keyring.Parse(oldKey)
	require.NoError(t, err)
	closed, err := vault.New(db, r)
	require.NoError(t, err)
	_, err = closed.Decoder(aggregates.Order.Facts)("OrderCreated", data)
	var temporary interface{ Temporary() bool }
	require.ErrorAs(t, err, &temporary)
	require.True(t, temporary.Temporary())
}

// Rewrap re-seals every data key under the new first master key without
// touching an event; then the old master key can go.
func TestRewrapDataKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := f.vault(t, oldKey)
	subjects := []string{uuid.New(), uuid.New(), uuid.New()}
	var events [][]byte
	for _, s := range subjects {
		require.True(t, f.adopt(t, old, s))
		events = append(events, sealed(t, old, s, "notes of "+s))
	}
	both := f.vault(t, newKey+"\n"+oldKey)
	n, err := both.Rewrap(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(subjects), n)
	n, err = both.Rewrap(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to re-seal")

	onlyNew := f.vault(t, newKey)
	for i, s := range subjects {
		e, err := onlyNew.Decoder(aggregates.Order.Facts)("OrderCreated", events[i])
		require.NoError(t, err)
		require.Equal(t, "notes of "+s, e.(order.Created).Notes)
	}
	var sealedKey []byte
	require.NoError(t, f.db.QueryRow(`SELECT sealed FROM data_keys WHERE subject_id = $1`, subjects[0]).Scan(&sealedKey))
	id, err := keyring.KeyID(sealedKey)
	require.NoError(t, err)
	require.Equal(t, "new", id)
	require.False(t, bytes.Contains(sealedKey, []byte("notes")))
}

// Sealing finds the personal members by their bytes, not by decoding: any
// text round-trips, whatever it holds (quotes, a key's name, braces,
// escapes, other scripts), also after Postgres's jsonb has rewritten the
// object (key order, spaces), and the ids and amounts stay in clear.
func TestSealRoundTripsAnyText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	v := f.vault(t, oldKey)
	subject := uuid.New()
	require.True(t, f.adopt(t, v, subject))
	texts := []string{"", "plain", `say "hi"`, `,"notes":"x"`, `{"sealed":1}`, `\"sealed\": `, "tab\tnew\nline", "Zoë 東京 🙂", `\\`, "}", "sealed"}
	for i := range 200 { // and arbitrary bytes, as strings
		b := make([]byte, i%40)
		for j := range b {
			b[j] = byte((i*31 + j*7) % 256)
		}
		texts = append(texts, string(bytes.ToValidUTF8(b, []byte("?"))))
	}
	for _, text := range texts {
		e := order.Cancelled{From: order.StatusPending, Reason: text}
		data, err := json.Marshal(e)
		require.NoError(t, err)
		sealedData, err := v.Seal(subject, "OrderCancelled", data, order.Personal["OrderCancelled"])
		require.NoError(t, err, "%q", text)
		require.True(t, json.Valid(sealedData), "%q: %s", text, sealedData)
		require.Contains(t, string(sealedData), `"from":"pending"`)
		// As the events table gives it back: jsonb's own order and spacing.
		var jsonb string
		require.NoError(t, f.db.QueryRow(`SELECT $1::jsonb::text`, string(sealedData)).Scan(&jsonb))
		for _, stored := range [][]byte{sealedData, []byte(jsonb)} {
			got, err := v.Decoder(aggregates.Order.Facts)("OrderCancelled", stored)
			require.NoError(t, err, "%q: %s", text, stored)
			require.Equal(t, text, got.(order.Cancelled).Reason, "%s", stored)
			require.Equal(t, order.StatusPending, got.(order.Cancelled).From)
		}
	}
}

// Prefetch reads the keys a catch-up page needs in one query: afterwards
// the page decodes without reading data_keys again (here: the rows are
// gone, and the events still open), and an erased subject reads erased.
func TestPrefetchLoadsAPageOfKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	writer := f.vault(t, oldKey)
	var payloads [][]byte
	var subjects []string
	for i := range 3 {
		s := uuid.New()
		subjects = append(subjects, s)
		require.True(t, f.adopt(t, writer, s))
		env, err := json.Marshal(event.Envelope{ID: uuid.New(), Type: "OrderCreated", Data: sealed(t, writer, s, "notes "+strconv.Itoa(i))})
		require.NoError(t, err)
		payloads = append(payloads, env)
	}
	erased := uuid.New()
	require.True(t, f.adopt(t, writer, erased))
	erasedEnv, err := json.Marshal(event.Envelope{ID: uuid.New(), Type: "OrderCreated", Data: sealed(t, writer, erased, "gone")})
	require.NoError(t, err)
	payloads = append(payloads, erasedEnv)
	_, err = f.db.Exec(`DELETE FROM data_keys WHERE subject_id = $1`, erased)
	require.NoError(t, err)
	_, err = f.db.Exec(`INSERT INTO erased_subjects (subject_id, merchant_id, subject_type, erased_by) VALUES ($1, $2, 'customer', 'test')`, erased, f.merchant)
	require.NoError(t, err)

	reader := f.vault(t, oldKey)
	reader.Prefetch(payloads)
	_, err = f.db.Exec(`DELETE FROM data_keys`)
	require.NoError(t, err)
	for i, p := range payloads {
		var env event.Envelope
		require.NoError(t, json.Unmarshal(p, &env))
		e, err := reader.Decoder(aggregates.Order.Facts)("OrderCreated", env.Data)
		require.NoError(t, err, "event %d", i)
		if i < len(subjects) {
			require.Equal(t, "notes "+strconv.Itoa(i), e.(order.Created).Notes)
		} else {
			require.Equal(t, []string{"notes"}, e.(order.Created).ErasedFields)
		}
	}
}
