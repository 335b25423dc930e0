package refdata_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// A name is stored as its client sent it, and an accented letter has two
// Unicode forms that look the same: é as one code point (NFC, what most
// keyboards type) or as e and a combining accent (NFD, what text from a
// macOS file name or some PDFs holds). A search finds the name whichever
// form it and the name were sent in: a dispatcher typing "José" finds the
// customer whose name came in decomposed, and the other way round.
func TestSearchFindsANameWhateverItsUnicodeForm(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	m := uuid.New()
	_, err := db.DB.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES ($1, $2)`, m, "m-"+m)
	require.NoError(t, err)
	const composed, decomposed = "Jos\u00e9 Comp", "Jose\u0301 Decomp"
	for _, table := range searchTables {
		cols, vals, _ := strings.Cut(table.extra, "|")
		for _, name := range []string{composed, decomposed, "Josefa Plain"} {
			_, err := db.DB.ExecContext(ctx, `INSERT INTO `+table.name+` (id, merchant_id, name`+cols+`) VALUES ($1, $2, $3`+vals+`)`,
				uuid.New(), m, name)
			require.NoError(t, err)
		}
		for q, want := range map[string]int{
			"jos\u00e9":        2, // typed composed: both José
			"jose\u0301":       2, // typed decomposed: both José
			"jos\u00e9 decomp": 1,
			"jose\u0301 comp":  1,
		} {
			total, err := table.list(db, m, q)
			require.NoError(t, err)
			require.Equal(t, want, total, "%s: q=%q (%+q)", table.name, q, q)
		}
	}
}
