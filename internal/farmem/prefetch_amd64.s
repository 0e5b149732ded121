#include "textflag.h"

// func prefetchT0(addr uintptr)
TEXT ·prefetchT0(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)
	RET
