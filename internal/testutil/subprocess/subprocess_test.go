package subprocess

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestChildWorker is the child of TestKill: it prints a readiness line,
// counts until killed, and never ends by itself.
func TestChildWorker(t *testing.T) {
	if Role() != "TestChildWorker" {
		t.Skip("run by TestKill")
	}
	fmt.Println("ready", os.Getenv("SUBPROCESS_TEST_WORD"))
	for i := 0; ; i++ {
		fmt.Println("count", i)
		time.Sleep(time.Millisecond)
	}
}

// TestChildExit is the child of TestWait: it prints two lines and exits 3.
func TestChildExit(t *testing.T) {
	if Role() != "TestChildExit" {
		t.Skip("run by TestWait")
	}
	fmt.Println("one")
	fmt.Println("two")
	os.Exit(3)
}

func TestKill(t *testing.T) {
	if Role() != "" {
		t.Skip("in a child")
	}
	p := Start(t, Command("TestChildWorker", "SUBPROCESS_TEST_WORD=hello"))
	if got := p.WaitFor("ready ", time.Minute); got != "hello" {
		t.Fatalf("readiness line ends with %q, want the child's environment's %q", got, "hello")
	}
	for want := 0; want < 3; want++ {
		l, err := p.Next(time.Minute)
		if err != nil || l != fmt.Sprint("count ", want) {
			t.Fatalf("line %q, %v; want count %d", l, err, want)
		}
	}
	p.Kill()
	if l, err := p.Next(time.Second); err != io.EOF {
		t.Fatalf("after Kill: %q, %v; want io.EOF", l, err)
	}
	var exit *exec.ExitError
	if _, err := p.Wait(); !errors.As(err, &exit) || exit.Exited() {
		t.Fatalf("exit status %v, want killed by a signal", err)
	}
}

func TestWait(t *testing.T) {
	if Role() != "" {
		t.Skip("in a child")
	}
	p := Start(t, Command("TestChildExit"))
	if got := p.WaitFor("on", time.Minute); got != "e" {
		t.Fatalf("WaitFor = %q", got)
	}
	rest, err := p.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("exit %v, want status 3", err)
	}
	if !slices.Contains(rest, "two") {
		t.Fatalf("unread lines %q, want two among them", rest)
	}
}

func TestNextTimeout(t *testing.T) {
	p := Start(t, exec.Command("sleep", "60"))
	if _, err := p.Next(50 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Next on a silent child: %v, want ErrTimeout", err)
	}
	p.Kill()
}
