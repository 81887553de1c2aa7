/* worker/data/numpy.h - NumPy arrays as training data: .npz archives (as
 * numpy.savez writes them, members stored, or deflated by
 * numpy.savez_compressed) and .npy pairs.
 *
 * A .npz holds the images and the labels as two arrays named by
 * --feature-image and --feature-label (default "x" and "y":
 * numpy.savez(path, x=images, y=labels)). A .npy file holds the images; its
 * labels are the file of the same name with the last occurrence of the
 * image name in its base name replaced by the label name
 * ("d/x_train.npy" -> "d/y_train.npy"); a spec's files that are the labels
 * of another of its files are read with them, not counted as data files.
 *
 * Images: shape (n, d1[, d2[, d3]]), dtype uint8 (scaled to [0, 1]) or
 * float32/float64 (as is, finite), C order; --image-shape, when given, must
 * have d1*d2*d3 features and becomes the per-sample shape. Labels: shape (n)
 * or (n, 1), any integer dtype, each in [0, 2^31). Formats 1.0 to 3.0 of the
 * .npy header; ZIP64 sizes in central directory entries.
 *
 * Every error is CTRAIN_E_DATA (exit 65) naming the file (and the member),
 * an allocation that fails CTRAIN_E_NOMEM. Files are read whole (under
 * 4 GiB), a member inflates into memory that grows as bytes arrive (at most
 * its declared size, its CRC-32 checked). */
#ifndef CTRAIN_DATA_NUMPY_H
#define CTRAIN_DATA_NUMPY_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/data/data.h"

/* True when `path` ends in .npy or .npz. */
int npy_name_matches(const char *path);

/* Drops from names[0..*n) (freeing them) the .npy files that are the labels
 * file of another entry. */
void npy_drop_partners(char **names, int *n, const data_format *fmt);

/* Appends the samples of the .npz or .npy (and its partner) `path` to ds. */
CTRAIN_NODISCARD ctrain_err npy_load(const char *path, const data_format *fmt, data_set *ds,
                                     char *errbuf, size_t errlen);

#endif
