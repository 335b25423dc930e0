// Package advisory is Hearth's one scheme for PostgreSQL advisory-lock keys:
// every lock has a name, and [Key] derives its int64 key from that name.
// The names are written here, so pg_locks can be read against one list.
//
// Lock names and keys:
//
//   - [Projection](name) ("hearth/projections/<projection>"): the
//     leadership lock of one projection (package leader: a Scheduler unit),
//     session-level, on the event store. Each has its fencing term in
//     projection_leader under the same name.
//   - [Projections] ("hearth/projections"): the one leadership lock of the
//     versions before per-projection leadership, which ran every
//     projection under it. Each projection's lock session now holds it in
//     shared mode (leader.Config.Guard), see below.
//   - [Relay] ("hearth/relay"): the leadership lock of the relay to NATS
//     JetStream (adapters/pubsub/relay), session-level, on the event store;
//     its fencing term has its own row in projection_leader.
//   - [Webhooks] ("hearth/webhooks"): the leadership lock of webhook
//     delivery (cmd/app, adapters/webhooks: a Scheduler unit),
//     session-level, on the event store; its term has its own row in
//     projection_leader, and is copied to event_store_terms, which fences
//     the delivery's writes to the event store.
//   - [Plans] ("hearth/plans"): the leadership lock of the visit
//     generator (cmd/app: a Scheduler unit), fenced in the event store as
//     Webhooks is.
//   - [Rebuild](projection) ("hearth/rebuild/<projection>"): one rebuild of a
//     projection at a time (adapters/readmodel), session-level, on the read
//     model.
//   - [Migrations]: migration runs (package migrations), transaction-level,
//     on each database. Its key is the one exception, see below.
//
// # Stability during a rolling upgrade
//
// A key is shared by every version of Hearth that takes the lock: an old and
// a new instance exclude each other only if they derive the same key. So a
// key that old instances take on their own during a rollout never changes.
//
//   - The leadership key was already Key("hearth/projections"): unchanged.
//     Leadership per projection added a lock per projection; an older
//     instance knows only the one lock, so the new locks alone would let it
//     project beside them. Each projection's lock session therefore takes
//     Key("hearth/projections") in shared mode before it campaigns: an
//     older leader (exclusive) and newer ones (shared) exclude each other,
//     and each term a newer one begins increments the older term too,
//     which refuses an older leader's transactions still in flight. When no
//     instance older than per-projection leadership can run any more, the
//     guard can go.
//   - The migrations key predates this scheme (the first 8 bytes of
//     "hearth-migrations" as a big-endian int64). Every instance migrates at
//     start-up, so during a rollout old and new instances run migrations at
//     the same time: changing the key would let them migrate concurrently.
//     It is kept as [MigrationsKey], byte for byte.
//   - Rebuilds used hashtext('hearth/rebuild/<table>') computed in SQL; they
//     now use Key. A rebuild is started only by an operator, never by an
//     instance on its own, so the rollout itself takes no rebuild lock; do
//     not start a rebuild while instances of an older version still run one
//     (docs/operations.md says so).
package advisory

import (
	"crypto/sha256"
	"encoding/binary"
)

// Projections names the leadership lock of older versions, which now
// guards the projections' own locks (see the package documentation).
const Projections = "hearth/projections"

// Projection names the leadership lock of one projection.
func Projection(projection string) string { return Projections + "/" + projection }

// Relay names the relay's leadership lock.
const Relay = "hearth/relay"

// Webhooks names the leadership lock of webhook delivery.
const Webhooks = "hearth/webhooks"

// Plans names the leadership lock of the visit generator (service plans
// turned into orders ahead); its term is copied to event_store_terms, as
// Webhooks' is.
const Plans = "hearth/plans"

// Erasures names the leadership lock of the erasure worker, which runs the
// second passes of erasures whose callers did not (ops.Erasures.RunDue).
const Erasures = "hearth/erasures"

// Rebuild names the lock that keeps two rebuilds of one projection apart.
func Rebuild(projection string) string { return "hearth/rebuild/" + projection }

// MigrationsKey is the key of the lock that serialises migration runs: the
// first 8 bytes of "hearth-migrations" read as a big-endian int64 ("hearth-m").
// It is not derived through Key, to stay the key that running versions take
// (see the package documentation).
const MigrationsKey int64 = 0x6865617274682d6d

// Key returns the int64 advisory-lock key for name: the first 8 bytes of
// SHA-256(name), read as a big-endian two's-complement int64. For
// [Projections] it is -3139509515664720772 (bytes d46e38bab5d87c7c).
//
// An operator can compute it in SQL:
//
//	SELECT ('x' || left(encode(sha256(convert_to('hearth/projections', 'UTF8')), 'hex'), 16))::bit(64)::bigint;
//
// pg_locks shows a bigint advisory key split into two oid columns, with
// objsubid = 1: classid holds the high 32 bits and objid the low 32 bits.
// Advisory locks are per database: a lock is only exclusive among sessions
// connected to the same database.
func Key(name string) int64 {
	sum := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}
