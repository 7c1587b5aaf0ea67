package web_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/web"
)

// At most MaxStreams overview streams are open at once; one more is refused
// with 503 (the page then polls), and a closed stream frees its place.
func TestOverviewStreamsAreCapped(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	defer close(done)
	e := newEnv(t, nil, web.Options{StreamInterval: time.Hour, Done: done}, false)
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	open := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/ui/api/overview/stream")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the stream is up
				t.Fatal(err)
			}
		}
		return resp
	}
	var streams []*http.Response
	for range web.MaxStreams {
		resp := open()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %s, want 200", len(streams), resp.Status)
		}
		streams = append(streams, resp)
	}
	if resp := open(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream %d: %s, want 503", web.MaxStreams+1, resp.Status)
	} else {
		resp.Body.Close()
	}
	streams[0].Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := open()
		if resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("a closed stream never freed its place")
		}
		time.Sleep(10 * time.Millisecond) // the server notices the closed stream asynchronously
	}
	for _, s := range streams[1:] {
		s.Body.Close()
	}
}
