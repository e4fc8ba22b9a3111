// Symbol visibility for libstrata.so: everything is hidden unless marked.
#pragma once

#define STRATA_API [[gnu::visibility("default")]]
