/* The PMI-2 API of Slurm's libpmi2 (Debian: libpmi2-0-dev). */
#include <pmi2.h>
