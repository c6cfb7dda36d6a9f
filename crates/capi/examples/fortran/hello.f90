! hello.f90: labios.h from Fortran through ISO_C_BINDING, with no wrapper
! library: the interfaces below bind the C functions as they are.
!
!   gfortran hello.f90 $(pkg-config --libs labios) -o hello_f
!   ./hello_f [ENDPOINT]      (default: LABIOS_ENDPOINT; credentials from
!                              LABIOS_KEY and LABIOS_SECRET)
module labios_f
    use, intrinsic :: iso_c_binding
    implicit none

    ! enum labios_status of labios.h
    integer(c_int), parameter :: LABIOS_OK = 0, LABIOS_ENOTFOUND = -1, &
        LABIOS_EEXIST = -2, LABIOS_EINVAL = -3, LABIOS_EPERM = -4, &
        LABIOS_EFULL = -5, LABIOS_ETIMEDOUT = -6, LABIOS_EFAILED = -7, &
        LABIOS_EIO = -8, LABIOS_EUNAVAILABLE = -9

    interface
        ! endpoint, key and secret are C strings or c_null_ptr (environment).
        integer(c_int) function labios_connect(endpoint, key, secret, h) &
                bind(C, name="labios_connect")
            import :: c_int, c_ptr
            type(c_ptr), value :: endpoint, key, secret
            type(c_ptr), intent(out) :: h
        end function

        integer(c_int) function labios_disconnect(h) bind(C, name="labios_disconnect")
            import :: c_int, c_ptr
            type(c_ptr), value :: h
        end function

        integer(c_int) function labios_write(h, path, offset, buf, length) &
                bind(C, name="labios_write")
            import :: c_int, c_ptr, c_char, c_int64_t, c_size_t
            type(c_ptr), value :: h
            character(kind=c_char), dimension(*), intent(in) :: path, buf
            integer(c_int64_t), value :: offset
            integer(c_size_t), value :: length
        end function

        integer(c_int) function labios_read(h, path, offset, buf, length, nread) &
                bind(C, name="labios_read")
            import :: c_int, c_ptr, c_char, c_int64_t, c_size_t
            type(c_ptr), value :: h
            character(kind=c_char), dimension(*), intent(in) :: path
            integer(c_int64_t), value :: offset
            character(kind=c_char), dimension(*), intent(out) :: buf
            integer(c_size_t), value :: length
            integer(c_size_t), intent(out) :: nread
        end function

        type(c_ptr) function labios_strerror(code) bind(C, name="labios_strerror")
            import :: c_int, c_ptr
            integer(c_int), value :: code
        end function

        type(c_ptr) function labios_last_error() bind(C, name="labios_last_error")
            import :: c_ptr
        end function

        integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
            import :: c_size_t, c_ptr
            type(c_ptr), value :: s
        end function
    end interface

contains

    ! A copy of the NUL-terminated C string at p.
    function f_string(p) result(s)
        type(c_ptr), intent(in) :: p
        character(len=:), allocatable :: s
        character(kind=c_char), pointer :: chars(:)
        integer :: i, n
        n = int(c_strlen(p))
        call c_f_pointer(p, chars, [n])
        allocate (character(len=n) :: s)
        do i = 1, n
            s(i:i) = chars(i)
        end do
    end function

    subroutine die(what, rc)
        character(len=*), intent(in) :: what
        integer(c_int), intent(in) :: rc
        write (*, '(5a)') 'hello.f90: ', what, ': ', f_string(labios_strerror(rc)), &
            ': '//f_string(labios_last_error())
        error stop 2
    end subroutine
end module

program hello
    use labios_f
    implicit none
    character(kind=c_char, len=*), parameter :: path = '/hello/fortran.txt'//c_null_char
    character(kind=c_char, len=*), parameter :: text = 'Hello from Fortran through LABIOS labels!'
    character(kind=c_char, len=512), target :: endpoint
    character(kind=c_char, len=128) :: back
    type(c_ptr) :: h, endpoint_ptr
    integer(c_size_t) :: n
    integer(c_int) :: rc
    integer :: arglen

    endpoint_ptr = c_null_ptr
    if (command_argument_count() >= 1) then
        call get_command_argument(1, endpoint, arglen)
        endpoint(arglen + 1:arglen + 1) = c_null_char
        endpoint_ptr = c_loc(endpoint)
    end if

    rc = labios_connect(endpoint_ptr, c_null_ptr, c_null_ptr, h)
    if (rc /= LABIOS_OK) call die('connect', rc)

    rc = labios_write(h, path, 0_c_int64_t, text, len(text, kind=c_size_t))
    if (rc /= LABIOS_OK) call die('write', rc)
    rc = labios_read(h, path, 0_c_int64_t, back, len(back, kind=c_size_t), n)
    if (rc /= LABIOS_OK) call die('read', rc)
    if (n /= len(text) .or. back(1:n) /= text) then
        write (*, '(a,i0,3a)') 'hello.f90: read back ', n, ' bytes "', back(1:n), '"'
        stop 1
    end if
    write (*, '(a,i0,2a)') 'hello.f90: ', n, ' bytes back: ', back(1:n)

    ! The error path: a file that does not exist.
    rc = labios_read(h, '/hello/no-such-file'//c_null_char, 0_c_int64_t, back, &
                     len(back, kind=c_size_t), n)
    if (rc /= LABIOS_ENOTFOUND) then
        write (*, '(a,i0)') 'hello.f90: reading a missing file returned ', rc
        stop 1
    end if
    write (*, '(4a)') 'hello.f90: missing file: ', f_string(labios_strerror(rc)), &
        ': ', f_string(labios_last_error())

    rc = labios_disconnect(h)
    if (rc /= LABIOS_OK) call die('disconnect', rc)
    write (*, '(a)') 'hello.f90: OK'
end program
