/* ctrain/version.h - the release, set by CMake from project(VERSION). */
#ifndef CTRAIN_VERSION_H
#define CTRAIN_VERSION_H
#ifndef CTRAIN_VERSION
#define CTRAIN_VERSION "0.0.0-dev"
#endif
#endif
