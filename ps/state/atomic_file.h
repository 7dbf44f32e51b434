/* Files that appear whole or not at all: the content goes to a temporary file beside the
 * final one (same directory, so that rename(2) is atomic), which is written fully, fsync'd,
 * renamed over the final name, and then the directory is fsync'd so that the rename itself
 * survives a power loss. A crash at any point leaves either the old file or the new one
 * under the final name, never a mix, plus at worst a stale temporary file named
 * ".BASENAME.tmp.PID" that the next writer may remove (pst_afile_is_temp).
 *
 * Used for checkpoints (ps/state/checkpoint.h) and for `pstrain export`'s outputs. */
#ifndef PSTRAIN_PS_ATOMIC_FILE_H
#define PSTRAIN_PS_ATOMIC_FILE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  int fd;                 /* the temporary file, -1 when none is open */
  char path[PATH_MAX];    /* the final name */
  char tmp[PATH_MAX];     /* the temporary name, "" when there is nothing to remove */
  uint64_t written;       /* bytes written so far */
  /* Test-only fault injection (see PSTRAIN_CKPT_FAULT_AT in ps/state/checkpoint.h): when
   * fault_at >= 0, abort() the moment `written` reaches fault_at, or in pst_afile_commit
   * just before the rename if the file ends up shorter than that; fault_renamed aborts just
   * after the rename, before the directory fsync. Both are off after pst_afile_open. */
  int64_t fault_at;
  int fault_renamed;
} pst_afile;

/* Creates the temporary file for `path` (mode `mode`, e.g. 0640), O_EXCL; a leftover of
 * the same name (a crashed writer whose pid this one reuses) is removed first. Returns 0 or
 * a negative errno with a one-line reason. */
int pst_afile_open(pst_afile *f, const char *path, int mode, char *err, size_t errlen);
/* Appends n bytes, handling EINTR and short writes. On error the caller should call
 * pst_afile_discard. */
int pst_afile_write(pst_afile *f, const void *p, size_t n, char *err, size_t errlen);
/* fsync, close, rename over the final path, fsync the directory. On failure the temporary
 * file is closed and removed (the final name keeps its old content, if any). */
int pst_afile_commit(pst_afile *f, char *err, size_t errlen);
/* Closes and removes the temporary file; harmless after commit or a second time. */
void pst_afile_discard(pst_afile *f);

/* 1 when directory entry `entry` is a temporary file of pst_afile_open for a final name
 * that starts with `prefix` and ends with `suffix` (".ckpt-", ".safetensors"): "." prefix
 * ... suffix ".tmp." digits. */
int pst_afile_is_temp(const char *entry, const char *prefix, const char *suffix);
/* fsync(2) on a directory (O_DIRECTORY), so that entries created or renamed in it last. */
int pst_fsync_dir(const char *dir);
/* mkdir -p with `mode` for each directory it creates; a new last component's parent is
 * fsync'd so that the new directory itself survives a crash. */
int pst_mkdirs(const char *dir, int mode);

/* Outputs a process will write, checked before it does any work (a missing or unwritable
 * place is a configuration error, not a failure after training): each returns 0 or a
 * negative code with a one-line reason naming the flag. */
/* A file (--summary-json, --metrics): its directory exists and takes a new file, or it
 * exists, is no directory, and opens for writing. Nothing is left behind. */
int pst_check_output_file(const char *flag, const char *path, char *err, size_t errlen);
/* A directory to write in (--tensorboard, --checkpoint-dir): made when missing (its parents
 * too with `parents`, else they must exist), and it takes a new file. */
int pst_check_output_dir(const char *flag, const char *path, int parents, char *err,
                         size_t errlen);

#endif
