package migration

import (
	"os"
	"testing"

	"github.com/virtshard/virtshard/bench/cluster/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
