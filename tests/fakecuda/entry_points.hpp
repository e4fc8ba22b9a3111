// The stand-in driver's exported functions are declared by cuda.h; this
// header adds the export attribute every definition carries (the library is
// built with hidden visibility, so nothing else leaks out).
#pragma once

#include <cuda.h>

#define FAKECUDA_EXPORT [[gnu::visibility("default")]]
