package plane

import (
	"context"
	"errors"
)

// AnyVersion, as a write's ifVersion, writes whatever version is stored.
const AnyVersion int64 = -1

// The stores' errors.
var (
	// ErrConflict: the stored version is not the one the write expected
	// (an If-Match that lost a race, or a create of an existing record).
	ErrConflict = errors.New("plane: the record changed or exists")
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("plane: no such record")
)

// Store keeps the plane's records. Every write gets the next number of one
// sequence, the record's new version; a store is safe for concurrent use.
type Store interface {
	// Load returns every record and the sequence number of the last
	// write.
	Load(ctx context.Context) (records []Record, seq int64, err error)
	// Put writes data as the record kind/id if its stored version is
	// ifVersion (0: absent; AnyVersion: any), and returns its new
	// version; ErrConflict otherwise. It returns once the write is
	// durable.
	Put(ctx context.Context, kind Kind, id string, ifVersion int64, data []byte) (int64, error)
	// Delete removes kind/id if its stored version is ifVersion
	// (AnyVersion: any) and returns the deletion's version; ErrNotFound
	// if it is absent, ErrConflict if its version differs.
	Delete(ctx context.Context, kind Kind, id string, ifVersion int64) (int64, error)
	// Watch calls apply with the writes made after seq, in order, as
	// they happen, until ctx ends (then it returns a nil error). A
	// deletion is a record without data. When the writes cannot be
	// followed (the log was trimmed past seq, or the store lost its data),
	// it calls apply with every record and full set: they replace all
	// records. It returns the sequence number it reached, to resume from
	// after an error. A store only one process writes (the embedded one)
	// never calls apply.
	Watch(ctx context.Context, seq int64, apply func(records []Record, full bool)) (int64, error)
}
