package migrations_test

import (
	"context"
	"database/sql"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// Every table the migrations make has its row in the runbook's "What each
// table keeps, and for how long", in its database: what removes its rows,
// where and how often, or that nothing does. A table without one is a
// table nobody decided the retention of.
func TestEveryTableHasItsRetentionInTheRunbook(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, "\n## What each table keeps, and for how long\n")
	require.NotEqual(t, -1, start, "the runbook's section of every table's retention")
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end != -1 {
		section = section[:end+3]
	}
	// The tables each row names, by database ("event store", "read model").
	// A name with <topic> or <table> stands for any name in its place.
	named := map[string][]*regexp.Regexp{}
	for line := range strings.Lines(section) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		where := strings.TrimSpace(cells[2])
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
			pattern := regexp.QuoteMeta(m[1])
			pattern = strings.NewReplacer(`<topic>`, `[a-z_]+`, `<table>`, `[a-z_]+`).Replace(pattern)
			named[where] = append(named[where], regexp.MustCompile(`^`+pattern+`$`))
		}
	}

	urls := pgtest.NewSplitDBs(t)
	for where, url := range map[string]string{"event store": urls.EventStore, "read model": urls.ReadModel} {
		db, err := sql.Open("pgx", url)
		require.NoError(t, err)
		defer db.Close()
		rows, err := db.QueryContext(context.Background(), `SELECT table_name FROM information_schema.tables
			WHERE table_schema = 'public' AND table_type = 'BASE TABLE' AND table_name <> 'hearth_migrations' ORDER BY 1`)
		require.NoError(t, err)
		var tables []string
		for rows.Next() {
			var name string
			require.NoError(t, rows.Scan(&name))
			tables = append(tables, name)
		}
		require.NoError(t, rows.Err())
		require.NotEmpty(t, tables)
		for _, table := range tables {
			found := false
			for _, re := range named[where] {
				found = found || re.MatchString(table)
			}
			require.True(t, found, "table %s of the %s database has no row in docs/operations.md's \"What each table keeps, and for how long\"", table, where)
		}
	}
}
