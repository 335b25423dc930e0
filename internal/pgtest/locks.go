package pgtest

import (
	"database/sql"
	"testing"
	"time"
)

// DoneOrWaiting waits until the operation a test started in another
// goroutine has ended (done holds its result) or is waiting for a lock in
// db's database, and reports whether it ended. The database is the
// test's own (NewDB), so a backend of it waiting for a lock is that
// operation's. It fails t after 10 seconds of neither.
func DoneOrWaiting[T any](t testing.TB, db *sql.DB, done chan T) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if len(done) > 0 {
			return true
		}
		var waiting int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		if waiting > 0 {
			return false
		}
		if time.Now().After(deadline) {
			t.Fatal("the operation neither ended nor waited for a lock within 10 s")
		}
		<-tick.C
	}
}
