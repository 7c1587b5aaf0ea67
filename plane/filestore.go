package plane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// FileName is the embedded store's file under --data-dir.
const FileName = "plane.log"

// FileStore is the embedded default's Store: the records in memory and, with
// a directory, in a log file there, one JSON line per write, appended and
// fsynced before the write returns, so that a process killed right after
// a write's answer loses nothing. Opening replays the log; a last line cut
// short by a crash (a write never answered) is dropped, and a log grown
// past twice its records is compacted by writing it anew beside it, fsync
// and rename. Only one process may use a directory. Safe for concurrent
// use.
type FileStore struct {
	mu      sync.Mutex
	path    string   // "" without a directory
	file    *os.File // the log, open for appending; nil without a directory
	seq     int64
	records map[string]Record // by recordID
	lines   int               // lines in the log
}

var _ Store = (*FileStore)(nil)

// NewMemoryStore returns a FileStore without a file: records last as long
// as the process.
func NewMemoryStore() *FileStore {
	return &FileStore{records: map[string]Record{}}
}

// logLine is one write in the log; Data is absent for a deletion.
type logLine struct {
	Seq  int64           `json:"seq"`
	Kind Kind            `json:"kind"`
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data,omitempty"`
}

// OpenFileStore opens (creating) the log in dir and replays it; log
// receives the lines skipped as unreadable (slog.Default() when nil).
func OpenFileStore(dir string, log *slog.Logger) (*FileStore, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("plane: data dir: %w", err)
	}
	s := &FileStore{path: filepath.Join(dir, FileName), records: map[string]Record{}}
	good, err := s.replay(log)
	if err != nil {
		return nil, err
	}
	if s.lines > 2*len(s.records)+100 {
		if err := s.compact(); err != nil {
			return nil, err
		}
		good = -1
	}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("plane: %w", err)
	}
	if good >= 0 {
		// Drop a last line that a crash cut short: it was never answered.
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("plane: %w", err)
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("plane: %w", err)
	}
	s.file = f
	return s, nil
}

// replay reads the log; it returns the length of its complete lines.
func (s *FileStore) replay(log *slog.Logger) (int64, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("plane: %w", err)
	}
	var good int64
	for line := range bytes.Lines(data) {
		if line[len(line)-1] != '\n' {
			break // cut short by a crash
		}
		good += int64(len(line))
		s.lines++
		var l logLine
		if err := json.Unmarshal(line, &l); err != nil || l.Seq <= 0 {
			log.Error("plane: skipping an unreadable line of the log", "file", s.path, "offset", good-int64(len(line)), "error", err)
			continue
		}
		s.applyLine(l)
	}
	return good, nil
}

func (s *FileStore) applyLine(l logLine) {
	s.seq = max(s.seq, l.Seq)
	rid := recordID(l.Kind, l.ID)
	if l.Data == nil {
		delete(s.records, rid)
		return
	}
	s.records[rid] = Record{Kind: l.Kind, ID: l.ID, Version: l.Seq, Data: l.Data}
}

// compact writes the live records as a new log beside the old one, fsyncs
// it and renames it over the old one (then fsyncs the directory).
func (s *FileStore) compact() error {
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("plane: compacting: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, r := range s.records {
		line, _ := json.Marshal(logLine{Seq: r.Version, Kind: r.Kind, ID: r.ID, Data: r.Data})
		w.Write(append(line, '\n'))
	}
	err = errors.Join(w.Flush(), f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err != nil {
		return fmt.Errorf("plane: compacting: %w", err)
	}
	s.lines = len(s.records)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// Close closes the log.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	return err
}

// Load implements Store.
func (s *FileStore) Load(context.Context) ([]Record, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, r)
	}
	return out, s.seq, nil
}

// Put implements Store.
func (s *FileStore) Put(_ context.Context, kind Kind, id string, ifVersion int64, data []byte) (int64, error) {
	return s.write(kind, id, ifVersion, data)
}

// Delete implements Store.
func (s *FileStore) Delete(_ context.Context, kind Kind, id string, ifVersion int64) (int64, error) {
	return s.write(kind, id, ifVersion, nil)
}

func (s *FileStore) write(kind Kind, id string, ifVersion int64, data []byte) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.records[recordID(kind, id)]
	switch {
	case data == nil && !exists:
		return 0, ErrNotFound
	case ifVersion != AnyVersion && ifVersion != cur.Version:
		return 0, ErrConflict
	}
	l := logLine{Seq: s.seq + 1, Kind: kind, ID: id, Data: data}
	if s.file != nil {
		line, _ := json.Marshal(l)
		if _, err := s.file.Write(append(line, '\n')); err != nil {
			return 0, fmt.Errorf("plane: writing the log: %w", err)
		}
		if err := s.file.Sync(); err != nil {
			return 0, fmt.Errorf("plane: syncing the log: %w", err)
		}
		s.lines++
	}
	s.applyLine(l)
	return l.Seq, nil
}

// Watch implements Store: no other process writes the records, so it
// waits for ctx to end.
func (s *FileStore) Watch(ctx context.Context, seq int64, _ func([]Record, bool)) (int64, error) {
	<-ctx.Done()
	return seq, nil
}
